"""The clients the commands talk to the world through: AWS (aws.py), the cluster's Kubernetes API
(kube.py, or a kubeconfig's: kubeconfig.py), and a Ray head through it (ray_head.py: which head
and its token; driver_log.py: the Jobs API's driver log; portforward.py: the dashboard)."""
