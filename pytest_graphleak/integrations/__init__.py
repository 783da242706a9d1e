"""Ready-made checks for the loops users run through a framework.

``pytest_graphleak.integrations.lightning.GraphLeakCallback`` (Lightning),
``.transformers.GraphLeakCallback`` (the transformers Trainer) and
``.ignite.GraphLeakHandler`` (pytorch-ignite). Each samples once per optimizer step and
judges, and diagnoses a leak, at the run's last training step, inside the loop. Importing
this package imports no framework: each module imports only its own.
"""
