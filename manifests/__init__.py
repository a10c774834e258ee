"""Deploy-time renderers of the Ray workloads: the KubeRay RayJob and RayServices, their
NetworkPolicies, SecretProviderClasses, disruption budgets, dashboards, the CRD check and the
workloads image's hash. cdk synth, ``hpray`` and ``python -m manifests render`` run them; none
of it ships in the workloads image (workloads/ is the runtime)."""
