"""Sizing: what an environment's workloads take of its nodes, derived once after the config loads.

``sizing.plan.plan_of(env)`` is the environment's plan (each workload's instance group, node and
worker counts, pod shapes and train-loop values); manifests, policies and reports read it.
``sizing.placement.problems(env)`` are the checks over the plan (placement, and the autoscaling
check of sizing/autoscaling.py) that the loader reports as config errors (config/loader.py),
with the messages of the config error path.
"""
