"""What ``preflight`` and ``status`` gather and judge: preflight.py (before ``cdk deploy``),
status.py (after it), checks.py (a check's row), images.py (the ECR pull-through cache and its
Docker Hub credential), base_image.py (the workloads image's base digest, which ``images
pin-base`` pins) and names.py (the deployed resources' names)."""
