"""The Ray workloads that run on the platform: training (RayJob) and inference (RayService)."""
