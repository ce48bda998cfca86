"""The parts of the one rule for what a command may write (:mod:`marlaas.out_folder`, which
says the rule and claims an ``--out``): its errors, manifests, the kinds of output folder, the
staging and old folders beside an output, the lock, the atomic swap, and the cleaning up of
what a killed command left."""
