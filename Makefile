# Two entry points on a fresh machine: `make demo` (the main job) and `make test`.
PYTHON ?= python3
APT_PACKAGES = nfs-ganesha nfs-ganesha-vfs libnfs13 libnfs-utils iproute2 iptables bindfs fuse3 systemd

.PHONY: install install-system demo test lint bench

install:
	$(PYTHON) -m pip install -q -e '.[test]'

# System packages for the root-only tests (NFSv4 lab, network namespaces, promtool).
install-system:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -q >/dev/null && \
	  apt-get install -y -q --no-install-recommends $(APT_PACKAGES) >/dev/null; \
	else echo "not root: skipping system packages (root-only tests will be skipped)"; fi

demo: install
	miqm demo

lint: install
	ruff check .

test: install install-system lint
	$(PYTHON) -m pytest -q -ra tests
	# the pure-Python twins of the store's C parts (what serves without a compiler)
	MIQM_NATIVE_LOG=0 $(PYTHON) -m pytest -q tests/unit

bench: install
	miqm bench store --json
