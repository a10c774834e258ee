"""Sizing: what an environment's workloads take of its nodes, derived once after the config loads.

``sizing.plan.plan_of(env, planners)`` is the environment's plan over the workloads' plan
functions (each workload's instance group, node and worker counts, pod shapes, Ray demands and
train-loop values); manifests, policies and reports read it through the registry of workloads
(manifests/registry.py), which passes its plan functions. ``sizing.placement.problems(env, plan)``
are the checks over a plan, with the messages of the config error path: placement, the
autoscaling check (``sizing.autoscaling``) and the checkpoint burst against FSx
(``sizing.storage``); manifests/check.py runs them over the registry's plan for every entry point. Sizing never imports the registry: the checks take the plan.
``sizing.goodput`` is the goodput sweep on paper (Young/Daly); ``python -m docgen.sizing_page``
writes both into docs/reference/sizing.md.
"""
