#!/usr/bin/env bash
# HyperPod lifecycle entry point (LifeCycleConfig.OnCreate). HyperPod runs it as root on every new
# node of every instance group, from the directory it downloaded SourceS3Uri into.
#
# It sets up /var/log/provision/, runs on_create_main.sh with all output appended to
# /var/log/provision/provisioning.log (and to stdout, which HyperPod ships to CloudWatch), and
# exits with the main script's exit status. On failure it waits HP_FAILURE_FLUSH_SECONDS so the
# CloudWatch agent can upload the log before HyperPod replaces the node.
#
# Environment (for tests; production uses the defaults):
#   HP_ROOT                   prefix for every path the scripts touch (default: empty = /)
#   HP_FAILURE_FLUSH_SECONDS  wait after a failure, seconds (default: 60)
#   plus the variables on_create_main.sh documents.
set -euo pipefail

HP_ROOT="${HP_ROOT:-}"
# 60 s: the CloudWatch agent on HyperPod nodes flushes logs at most every few seconds; a minute
# leaves room for a slow first upload without holding a broken node for long.
HP_FAILURE_FLUSH_SECONDS="${HP_FAILURE_FLUSH_SECONDS:-60}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log_dir="${HP_ROOT}/var/log/provision"
log_file="${log_dir}/provisioning.log"

if ! mkdir -p "$log_dir" || ! touch "$log_file"; then
  echo "on_create: cannot write the log file ${log_file}" >&2
  exit 1
fi

note() {
  echo "on_create: $*" | tee -a "$log_file"
}

note "[start] lifecycle scripts from ${here}"
set +e
# bash, not ./: S3 does not keep the executable bit of the uploaded files.
HP_ROOT="$HP_ROOT" bash "${here}/on_create_main.sh" 2>&1 | tee -a "$log_file"
rc="${PIPESTATUS[0]}"
set -e

if [[ "$rc" -ne 0 ]]; then
  note "[error] on_create_main.sh exited with status ${rc}; see the FAILED line above"
  sync || true
  sleep "$HP_FAILURE_FLUSH_SECONDS"
  exit "$rc"
fi
note "[done] all steps succeeded"
