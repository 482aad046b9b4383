#!/usr/bin/env bash
# Make sure a Docker daemon answers: install Debian's docker.io and start dockerd when none does.
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v git >/dev/null 2>&1 || need+=(git)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} (Debian packages)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  echo "starting dockerd (log: /var/log/swerl-dockerd.log)" >&2
  $SUDO sh -c 'nohup dockerd >/var/log/swerl-dockerd.log 2>&1 &'
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
fi
docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/swerl-dockerd.log" >&2; exit 1; }
