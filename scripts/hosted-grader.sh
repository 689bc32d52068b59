#!/usr/bin/env bash
# Runs a command as a hosted grader (Gradescope) runs `run_autograder`: as root in a container with
# Docker's default seccomp rules, which refuse `unshare`, `setns`, `mount` and namespace flags to
# `clone` without CAP_SYS_ADMIN (so bubblewrap cannot make its namespaces), and no network.
#
#   scripts/hosted-grader.sh COMMAND [ARGS...]
#
# The container is podman with runc (Debian's packages; installed with apt-get when missing and
# run as root), its root file system this machine's own behind an overlay that is thrown away
# (`--rootfs /:O`), with this machine's /tmp and the checkout bound in (read and write), the
# environment passed through, and the command run in the checkout. Its exit status is the
# command's.
#
# The seccomp profile is scripts/hosted-grader/seccomp.json: the rules of Docker's default
# profile, moby's profiles/seccomp/default.json (github.com/moby/profiles, as vendored by
# github.com/moby/moby at b985e2313a8676e18072b442911fc8f64f17d440, 2026-08-23; Apache-2.0),
# resolved for a container with Docker's default capabilities: the rules that need a capability
# Docker does not give (CAP_SYS_ADMIN, CAP_SYS_PTRACE, ...) left out, those that a default
# capability turns off removed. Podman's own default profile is more permissive (it allows
# namespaces), so it would not show the problem.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
checkout="$(cd "$here/.." && pwd)"
profile="$here/hosted-grader/seccomp.json"

if [ "$#" -eq 0 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "$0: run it as root (podman with runc, --rootfs /:O)" >&2
  exit 2
fi
if ! { command -v podman >/dev/null && command -v runc >/dev/null; }; then
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y podman runc >&2
fi

exec podman --runtime runc --cgroup-manager cgroupfs run --rm --init \
  --network none \
  --security-opt seccomp="$profile" \
  --ulimit nofile=1024:4096 --ulimit nproc=4096:4096 \
  --volume /tmp:/tmp --volume "$checkout:$checkout" --workdir "$PWD" \
  --env-host --env WORKBOOK_IN_HOSTED_GRADER=1 \
  --rootfs /:O "$@"
