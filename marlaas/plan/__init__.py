"""``marlaas plan``: the cheapest cluster, pool split and schedule on which every job of a
workload meets its deadline, found with the simulator.

    space.py     what is searched: pool sizes, trainer width, adapter slots, policy, preset;
                 prices; a configuration applied to the workload
    evaluate.py  configurations x seeds simulated through the sweep's runner, deadlines checked
    search.py    the search: bisection on inference devices for each training size, pruned by
                 price and by monotonicity; the brute-force grid it is checked against; the
                 fastest configuration within a budget
    results.py   plan.csv, the Pareto front, monotonicity, the binding deadline, plan.json
    page.py      plan.html, in the report's style
    command.py   the command: options, outputs, the one-line errors
"""
