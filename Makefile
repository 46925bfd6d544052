# Two entry points on a fresh machine: `make demo` (the main job) and `make test`.
PYTHON ?= python3
APT_PACKAGES = nfs-ganesha nfs-ganesha-vfs libnfs13 libnfs-utils iproute2 iptables bindfs fuse3 prometheus prometheus-alertmanager openjdk-17-jre-headless systemd podman podman-compose runc netavark aardvark-dns debootstrap

.PHONY: install install-system demo test lint bench mutation

install:
	$(PYTHON) -m pip install -q -e '.[test]'

# System packages for the root-only tests (NFSv4 lab, network namespaces, promtool, the
# compose brought up with rootful podman: netavark + aardvark-dns resolve service names).
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

# As root (CI), a test skipped for a reason root must not meet (the NFSv4 lab did not come
# up, a tool install-system installs is missing) fails the run; every run ends with a skip
# summary (tests/skips.py).
# Two pytest-xdist workers (TEST_WORKERS): most tests wait on leases, failovers and
# processes rather than compute, so two at a time halve the run on two CPUs; tests sharing
# one thing of the machine (the NFSv4 lab, the compose, the Spark JVM) stay on one worker
# (the xdist groups in tests/conftest.py). TEST_WORKERS=0 runs them one at a time.
TEST_WORKERS ?= 2
test: install install-system lint
	$(PYTHON) -m pytest -q -ra --durations=20 -n $(TEST_WORKERS) --dist loadgroup tests
	# the pure-Python twins of the store's C parts (what serves without a compiler)
	MIQM_NATIVE_LOG=0 $(PYTHON) -m pytest -q -ra -n $(TEST_WORKERS) --dist loadgroup tests/unit

# Every safety guard on tests/mutation/guards.toml broken in turn: each must make one of
# its tests fail (about two minutes; the source is always restored).
mutation: install
	$(PYTHON) -m tests.mutation.run

bench: install
	miqm bench store --json
