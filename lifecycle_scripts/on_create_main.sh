#!/usr/bin/env bash
# HyperPod (EKS orchestrator) node provisioning, run by on_create.sh as root on each new node.
#
# Steps, in order; each is idempotent and prints "[step NAME] changed: ..." or
# "[step NAME] unchanged: ..." for what it did. A failure prints "[step NAME] FAILED: why" and
# exits with the step's status:
#   data-volume     10  wait (bounded) for the instance's large volume to be mounted
#   containerd-root 11  put containerd's root on that volume (Amazon Linux 2 and 2023)
#   kubelet-state   12  move /var/lib/kubelet onto that volume and link it back
#   lustre-client   13  load the Lustre client kernel modules (lnet, lustre) for FSx
#
# Environment (tests point these at a fake root; production uses the defaults):
#   HP_ROOT                prefix for every path touched (default: empty = /)
#   HP_DATA_VOLUMES        candidate mount points, in order of preference
#                          (default: "/opt/sagemaker /opt/dlami/nvme")
#   HP_VOLUME_WAIT_SECONDS how long to wait for one of them (default: 60)
#   HP_VOLUME_POLL_SECONDS poll interval (default: 5)
#   HP_MOUNTS_FILE         mount table to read (default: /proc/mounts)
#   HP_SYSTEMCTL           systemctl command (default: systemctl)
#   HP_MODPROBE            modprobe command (default: modprobe)
set -Eeuo pipefail

HP_ROOT="${HP_ROOT:-}"
# /opt/sagemaker first: HyperPod mounts there the EBS volume this app sizes from config
# (ebs_volume_gib), so it exists on every node; /opt/dlami/nvme is the local NVMe of instances
# that have one, used when the EBS volume is absent.
HP_DATA_VOLUMES="${HP_DATA_VOLUMES:-/opt/sagemaker /opt/dlami/nvme}"
# 60 s: HyperPod mounts the volumes before lifecycle scripts normally run; a minute covers a
# slow attach without stalling a node whose volume will never come.
HP_VOLUME_WAIT_SECONDS="${HP_VOLUME_WAIT_SECONDS:-60}"
HP_VOLUME_POLL_SECONDS="${HP_VOLUME_POLL_SECONDS:-5}"
HP_MOUNTS_FILE="${HP_MOUNTS_FILE:-/proc/mounts}"
HP_SYSTEMCTL="${HP_SYSTEMCTL:-systemctl}"
HP_MODPROBE="${HP_MODPROBE:-modprobe}"

step_name="setup"
step_status=1
data_volume=""

say() { echo "[step ${step_name}] $*"; }

fail() {
  echo "[step ${step_name}] FAILED: $*" >&2
  exit "$step_status"
}

on_error() {
  local rc=$?
  echo "[step ${step_name}] FAILED: command '${BASH_COMMAND}' exited with status ${rc}" >&2
  exit "$step_status"
}
trap on_error ERR

begin() {
  step_name="$1"
  step_status="$2"
  say "start"
}

systemctl_() {
  # shellcheck disable=SC2086  # HP_SYSTEMCTL may carry arguments
  $HP_SYSTEMCTL "$@"
}

is_mounted() {
  awk -v mp="$1" '$2 == mp { found = 1 } END { exit !found }' "$HP_MOUNTS_FILE"
}

# Write $2 to file $1 only when it differs; prints "changed" or "unchanged".
write_if_changed() {
  local path="$1" content="$2"
  if [[ -f "$path" ]] && [[ "$(cat "$path")" == "$content" ]]; then
    echo unchanged
    return 0
  fi
  mkdir -p "$(dirname "$path")"
  printf '%s\n' "$content" >"$path"
  echo changed
}

# ---------------------------------------------------------------------------------------------

step_data_volume() {
  begin data-volume 10
  [[ -r "$HP_MOUNTS_FILE" ]] || fail "cannot read the mount table ${HP_MOUNTS_FILE}"
  local waited=0 candidate
  while :; do
    for candidate in $HP_DATA_VOLUMES; do
      if is_mounted "$candidate"; then
        data_volume="$candidate"
        say "unchanged: using ${data_volume} (mounted, found after ${waited} s)"
        return 0
      fi
    done
    if (( waited >= HP_VOLUME_WAIT_SECONDS )); then
      fail "none of ${HP_DATA_VOLUMES} was mounted within ${HP_VOLUME_WAIT_SECONDS} s (mount table ${HP_MOUNTS_FILE})"
    fi
    say "waiting for one of ${HP_DATA_VOLUMES} (${waited}/${HP_VOLUME_WAIT_SECONDS} s)"
    sleep "$HP_VOLUME_POLL_SECONDS"
    waited=$(( waited + HP_VOLUME_POLL_SECONDS ))
  done
}

step_containerd_root() {
  begin containerd-root 11
  local target="${data_volume}/containerd/data-root"
  local os_release="${HP_ROOT}/etc/os-release" version changed=0
  [[ -r "$os_release" ]] || fail "cannot read ${os_release} to tell Amazon Linux 2 from 2023"
  # shellcheck source=/dev/null
  version="$(. "$os_release" && echo "${VERSION_ID:-}")"

  case "$version" in
    2)
      local cfg="${HP_ROOT}/etc/eks/containerd/containerd-config.toml"
      [[ -f "$cfg" ]] || fail "Amazon Linux 2 but ${cfg} is missing"
      if grep -qxF "root = \"${target}\"" "$cfg"; then
        say "unchanged: ${cfg} already has root = \"${target}\""
      else
        if grep -qE '^[# ]*root[[:space:]]*=' "$cfg"; then
          sed -i -E "s|^[# ]*root[[:space:]]*=.*|root = \"${target}\"|" "$cfg"
        else
          sed -i "1i root = \"${target}\"" "$cfg"
        fi
        grep -qxF "root = \"${target}\"" "$cfg" || fail "could not set root in ${cfg}"
        say "changed: ${cfg} now has root = \"${target}\""
        changed=1
      fi
      ;;
    2023)
      local dropin="${HP_ROOT}/etc/systemd/system/containerd.service.d/20-data-root.conf" result
      # containerd's --root flag wins over the root in the config file that nodeadm writes.
      result="$(write_if_changed "$dropin" "[Service]
ExecStart=
ExecStart=/usr/bin/containerd --root ${target}")"
      say "${result}: ${dropin} runs containerd with --root ${target}"
      [[ "$result" == changed ]] && changed=1
      ;;
    *)
      say "unchanged: VERSION_ID '${version}' is neither Amazon Linux 2 nor 2023; containerd left on the root volume"
      return 0
      ;;
  esac

  local old="${HP_ROOT}/var/lib/containerd" new="${HP_ROOT}${target}"
  mkdir -p "$new"
  if [[ -d "$old" ]] && [[ -n "$(ls -A "$old")" ]] && [[ -z "$(ls -A "$new")" ]]; then
    cp -a "$old/." "$new/"
    say "changed: copied existing containerd state from /var/lib/containerd to ${target}"
  else
    say "unchanged: ${target} needs no copy"
  fi

  if (( changed )); then
    systemctl_ daemon-reload
    if systemctl_ is-active --quiet containerd; then
      systemctl_ restart containerd
      say "changed: restarted containerd on the new root"
    fi
  fi
}

step_kubelet_state() {
  begin kubelet-state 12
  local link="${HP_ROOT}/var/lib/kubelet" dest="${HP_ROOT}${data_volume}/kubelet"
  if [[ -L "$link" ]]; then
    local current
    current="$(readlink "$link")"
    [[ "$current" == "$dest" ]] || fail "/var/lib/kubelet already links to ${current}, not ${dest}"
    say "unchanged: /var/lib/kubelet already links to ${data_volume}/kubelet"
    return 0
  fi
  local was_active=0
  if systemctl_ is-active --quiet kubelet; then
    was_active=1
    systemctl_ stop kubelet
  fi
  mkdir -p "$dest" "$(dirname "$link")"
  if [[ -d "$link" ]]; then
    local moved
    moved="$(find "$link" -mindepth 1 -maxdepth 1 | wc -l)"
    find "$link" -mindepth 1 -maxdepth 1 -exec mv -t "$dest" -- {} +
    rmdir "$link"
    say "changed: moved ${moved} entries of /var/lib/kubelet to ${data_volume}/kubelet"
  elif [[ -e "$link" ]]; then
    fail "/var/lib/kubelet exists but is neither a directory nor a link"
  fi
  ln -s "$dest" "$link"
  say "changed: /var/lib/kubelet now links to ${data_volume}/kubelet"
  if (( was_active )); then
    systemctl_ start kubelet
    say "changed: restarted kubelet"
  fi
}

step_lustre_client() {
  begin lustre-client 13
  local module out
  for module in lnet lustre; do
    if [[ -d "${HP_ROOT}/sys/module/${module}" ]]; then
      say "unchanged: kernel module ${module} already loaded"
      continue
    fi
    # shellcheck disable=SC2086  # HP_MODPROBE may carry arguments
    if ! out="$($HP_MODPROBE "$module" 2>&1)"; then
      fail "modprobe ${module} failed: ${out:-no output}"
    fi
    say "changed: loaded kernel module ${module}"
  done
}

main() {
  step_data_volume
  step_containerd_root
  step_kubelet_state
  step_lustre_client
  step_name="all"
  say "done"
}

main "$@"
