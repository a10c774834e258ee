"""Acting on RayJobs by name (their command line: ops/commands/): control.py (``jobs``, ``logs``,
``stop``, ``resume``) and inspection.py (``describe``, ``pods``, ``logs --pod``, ``logs
--output-dir``)."""
