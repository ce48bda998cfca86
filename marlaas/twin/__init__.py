"""The twin, measured: fit the simulator's cost model from real runs (``calibrate``), simulate a
real run again (``replay``) and report how far the simulation is from what happened."""
