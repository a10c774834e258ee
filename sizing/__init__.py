"""Sizing: what an environment's workloads take of its nodes, derived once after the config loads.

``sizing.plan.plan_of(env)`` is the environment's plan (each workload's instance group, node and
worker counts, pod shapes and train-loop values); manifests, policies and reports read it.
``sizing.placement.problems(env)`` are the checks over the plan that ``sizing.check.load_checked``
reports as config errors after the loader (config/loader.py), with the messages of the config
error path: placement, the autoscaling check (``sizing.autoscaling``) and the checkpoint burst
against FSx (``sizing.storage``). ``python -m sizing ENV`` prints the placement and sizing.
``sizing.goodput`` is the goodput sweep on paper (Young/Daly); ``python -m docgen.sizing_page``
writes both into docs/reference/sizing.md.
"""
