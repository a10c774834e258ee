# Shared setup for the lifecycle-script tests: a fake node root, a mount table and stub
# systemctl/modprobe commands, so the real scripts run unmodified against a temporary tree.

SCRIPTS_DIR="$(cd "${BATS_TEST_DIRNAME}/../../lifecycle_scripts" && pwd)"

make_fake_node() {
  local os_version="${1:-2023}"
  export HP_ROOT="${BATS_TEST_TMPDIR}/root"
  export HP_MOUNTS_FILE="${BATS_TEST_TMPDIR}/mounts"
  export HP_FAILURE_FLUSH_SECONDS=0
  export HP_VOLUME_WAIT_SECONDS=2
  export HP_VOLUME_POLL_SECONDS=1
  export STUB_LOG="${BATS_TEST_TMPDIR}/calls.log"
  export STUB_ACTIVE_UNITS=""
  : >"$STUB_LOG"

  mkdir -p "$HP_ROOT/etc" "$HP_ROOT/opt/sagemaker" "$HP_ROOT/opt/dlami/nvme" "$HP_ROOT/sys/module" \
    "$HP_ROOT/var/lib/kubelet/pki" "$HP_ROOT/var/lib/containerd/io.containerd.content.v1.content"
  printf 'NAME="Amazon Linux"\nVERSION_ID="%s"\n' "$os_version" >"$HP_ROOT/etc/os-release"
  echo "kubeconfig" >"$HP_ROOT/var/lib/kubelet/kubeconfig"
  echo "cert" >"$HP_ROOT/var/lib/kubelet/pki/kubelet.crt"
  echo "hidden" >"$HP_ROOT/var/lib/kubelet/.state"
  echo "blob" >"$HP_ROOT/var/lib/containerd/io.containerd.content.v1.content/blob"
  if [[ "$os_version" == 2 ]]; then
    mkdir -p "$HP_ROOT/etc/eks/containerd"
    printf 'version = 2\nroot = "/var/lib/containerd"\nstate = "/run/containerd"\n' \
      >"$HP_ROOT/etc/eks/containerd/containerd-config.toml"
  fi
  printf 'proc /proc proc rw 0 0\n/dev/nvme1n1 /opt/sagemaker ext4 rw 0 0\n' >"$HP_MOUNTS_FILE"

  local bin="${BATS_TEST_TMPDIR}/bin"
  mkdir -p "$bin"
  # systemctl stub: records calls; is-active succeeds for the units in STUB_ACTIVE_UNITS.
  cat >"$bin/systemctl" <<'STUB'
#!/usr/bin/env bash
echo "systemctl $*" >>"$STUB_LOG"
if [[ "$1" == is-active ]]; then
  unit="${*: -1}"
  [[ " $STUB_ACTIVE_UNITS " == *" $unit "* ]]
fi
STUB
  # modprobe stub: "loads" a module by creating /sys/module/NAME in the fake root, or fails
  # for the module named in STUB_MODPROBE_FAIL.
  cat >"$bin/modprobe" <<'STUB'
#!/usr/bin/env bash
echo "modprobe $*" >>"$STUB_LOG"
if [[ "$1" == "${STUB_MODPROBE_FAIL:-}" ]]; then
  echo "modprobe: FATAL: Module $1 not found in directory /lib/modules/6.1" >&2
  exit 1
fi
mkdir -p "$HP_ROOT/sys/module/$1"
STUB
  chmod +x "$bin/systemctl" "$bin/modprobe"
  export HP_SYSTEMCTL="$bin/systemctl"
  export HP_MODPROBE="$bin/modprobe"
}

# Everything about the fake tree that matters: type, path, link target, file content hash.
# The provisioning log is excluded from the hashes: every run appends to it by design.
snapshot() {
  (
    cd "$HP_ROOT" || exit 1
    find . -printf '%y %p -> %l\n' | sort
    find . -type f ! -path ./var/log/provision/provisioning.log -exec sha256sum {} + | sort -k2
  )
}

run_on_create() {
  run bash "$SCRIPTS_DIR/on_create.sh"
}
