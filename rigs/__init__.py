"""Local rigs: a real multi-node Ray cluster on this machine and the rehearsals, load tests and
proofs that run on it (`make rehearse-train`, `make rehearse-serve`, `make rehearse-serve-ha`).
They import the workloads; the image and the workloads never import them."""
