#!/usr/bin/env bats
# The lifecycle scripts run for real against a fake node root (see test_helper.bash).

load test_helper

setup() {
  make_fake_node 2023
}

@test "Amazon Linux 2023: two runs reach the same end state, the second changes nothing" {
  run_on_create
  [ "$status" -eq 0 ]
  [[ "$output" == *"[step containerd-root] changed:"* ]]
  first="$(snapshot)"

  run_on_create
  [ "$status" -eq 0 ]
  [ "$first" = "$(snapshot)" ]
  for step in data-volume containerd-root kubelet-state lustre-client; do
    [[ "$output" == *"[step ${step}] unchanged:"* ]]
  done
  [[ "$output" != *"] changed:"* ]]
}

@test "Amazon Linux 2023: containerd gets a --root drop-in on the volume and keeps its state" {
  run_on_create
  [ "$status" -eq 0 ]
  dropin="$HP_ROOT/etc/systemd/system/containerd.service.d/20-data-root.conf"
  grep -qx 'ExecStart=' "$dropin"
  grep -qx 'ExecStart=/usr/bin/containerd --root /opt/sagemaker/containerd/data-root' "$dropin"
  [ "$(cat "$HP_ROOT/opt/sagemaker/containerd/data-root/io.containerd.content.v1.content/blob")" = blob ]
  grep -qx 'systemctl daemon-reload' "$STUB_LOG"
}

@test "Amazon Linux 2: containerd-config.toml root is rewritten, idempotently" {
  make_fake_node 2
  run_on_create
  [ "$status" -eq 0 ]
  cfg="$HP_ROOT/etc/eks/containerd/containerd-config.toml"
  grep -qx 'root = "/opt/sagemaker/containerd/data-root"' "$cfg"
  [ "$(grep -c '^root' "$cfg")" -eq 1 ]
  grep -qx 'state = "/run/containerd"' "$cfg"
  first="$(snapshot)"
  run_on_create
  [ "$status" -eq 0 ]
  [ "$first" = "$(snapshot)" ]
  [[ "$output" == *"[step containerd-root] unchanged: "*"already has root"* ]]
}

@test "kubelet state, hidden files included, moves to the volume behind a link" {
  run_on_create
  [ "$status" -eq 0 ]
  [ -L "$HP_ROOT/var/lib/kubelet" ]
  [ "$(readlink "$HP_ROOT/var/lib/kubelet")" = "$HP_ROOT/opt/sagemaker/kubelet" ]
  [ "$(cat "$HP_ROOT/var/lib/kubelet/kubeconfig")" = kubeconfig ]
  [ "$(cat "$HP_ROOT/opt/sagemaker/kubelet/pki/kubelet.crt")" = cert ]
  [ "$(cat "$HP_ROOT/opt/sagemaker/kubelet/.state")" = hidden ]
  [[ "$output" == *"[step kubelet-state] changed: moved 3 entries"* ]]
}

@test "running services are restarted once, not on the second run" {
  export STUB_ACTIVE_UNITS="containerd kubelet"
  run_on_create
  [ "$status" -eq 0 ]
  grep -qx 'systemctl restart containerd' "$STUB_LOG"
  grep -qx 'systemctl stop kubelet' "$STUB_LOG"
  grep -qx 'systemctl start kubelet' "$STUB_LOG"
  : >"$STUB_LOG"
  run_on_create
  [ "$status" -eq 0 ]
  ! grep -q 'restart\|stop\|start' "$STUB_LOG"
}

@test "Lustre client modules are loaded, and left alone when already loaded" {
  run_on_create
  [ "$status" -eq 0 ]
  grep -qx 'modprobe lnet' "$STUB_LOG"
  grep -qx 'modprobe lustre' "$STUB_LOG"
  : >"$STUB_LOG"
  run_on_create
  [ "$status" -eq 0 ]
  ! grep -q modprobe "$STUB_LOG"
  [[ "$output" == *"[step lustre-client] unchanged: kernel module lustre already loaded"* ]]
}

@test "everything is logged to /var/log/provision/provisioning.log" {
  run_on_create
  [ "$status" -eq 0 ]
  log="$HP_ROOT/var/log/provision/provisioning.log"
  grep -q '^on_create: \[start\]' "$log"
  grep -q '^\[step kubelet-state\] changed:' "$log"
  grep -q '^on_create: \[done\] all steps succeeded' "$log"
}

@test "only the local NVMe mounted: it is used" {
  printf '/dev/nvme2n1 /opt/dlami/nvme xfs rw 0 0\n' >"$HP_MOUNTS_FILE"
  run_on_create
  [ "$status" -eq 0 ]
  [ "$(readlink "$HP_ROOT/var/lib/kubelet")" = "$HP_ROOT/opt/dlami/nvme/kubelet" ]
}

@test "a volume that mounts late is waited for" {
  : >"$HP_MOUNTS_FILE"
  export HP_VOLUME_WAIT_SECONDS=10
  ( sleep 1; echo '/dev/nvme1n1 /opt/sagemaker ext4 rw 0 0' >>"$HP_MOUNTS_FILE" ) &
  run_on_create
  wait
  [ "$status" -eq 0 ]
  [[ "$output" == *"[step data-volume] waiting for one of /opt/sagemaker /opt/dlami/nvme"* ]]
  [[ "$output" == *"[step data-volume] unchanged: using /opt/sagemaker"* ]]
}

@test "volume never mounted: data-volume fails with status 10 and says why" {
  printf 'proc /proc proc rw 0 0\n' >"$HP_MOUNTS_FILE"
  run_on_create
  [ "$status" -eq 10 ]
  [[ "$output" == *"[step data-volume] FAILED: none of /opt/sagemaker /opt/dlami/nvme was mounted within 2 s"* ]]
  [[ "$output" == *"on_create: [error] on_create_main.sh exited with status 10"* ]]
  grep -q 'FAILED: none of' "$HP_ROOT/var/log/provision/provisioning.log"
  # Nothing after the failed step ran.
  [ -d "$HP_ROOT/var/lib/kubelet" ] && [ ! -L "$HP_ROOT/var/lib/kubelet" ]
}

@test "modprobe failing: lustre-client fails with status 13 and modprobe's message" {
  export STUB_MODPROBE_FAIL=lustre
  run_on_create
  [ "$status" -eq 13 ]
  [[ "$output" == *"[step lustre-client] FAILED: modprobe lustre failed: modprobe: FATAL: Module lustre not found"* ]]
}

@test "Amazon Linux 2 without its containerd config: containerd-root fails with status 11" {
  rm "$HP_ROOT/etc/eks/containerd/containerd-config.toml" 2>/dev/null || true
  printf 'VERSION_ID="2"\n' >"$HP_ROOT/etc/os-release"
  run_on_create
  [ "$status" -eq 11 ]
  [[ "$output" == *"[step containerd-root] FAILED: Amazon Linux 2 but $HP_ROOT/etc/eks/containerd/containerd-config.toml is missing"* ]]
}

@test "kubelet already linked elsewhere: kubelet-state fails with status 12" {
  rm -rf "$HP_ROOT/var/lib/kubelet"
  ln -s /somewhere/else "$HP_ROOT/var/lib/kubelet"
  run_on_create
  [ "$status" -eq 12 ]
  [[ "$output" == *"[step kubelet-state] FAILED: /var/lib/kubelet already links to /somewhere/else"* ]]
}

@test "an unexpected command failure names the step, the command and its status" {
  # A plain file where containerd's directory belongs makes mkdir fail inside containerd-root.
  echo "not a directory" >"$HP_ROOT/opt/sagemaker/containerd"
  run_on_create
  [ "$status" -eq 11 ]
  [[ "$output" == *"[step containerd-root] FAILED: command 'mkdir -p \"\$new\"' exited with status 1"* ]]
}
