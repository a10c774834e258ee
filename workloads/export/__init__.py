"""The export workload: a verified platform checkpoint as a Hugging Face model folder
(``python -m workloads.export``; the conversion is ``workloads.common.hf_llama``)."""
