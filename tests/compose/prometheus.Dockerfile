# Stand-in for prom/prometheus where no registry is reachable: Debian's package, the
# official image's entry point, default flags and paths.
ARG BASE=localhost/debian-py:bookworm
FROM ${BASE}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends prometheus && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /prometheus /etc/prometheus && ln -sf /usr/bin/prometheus /bin/prometheus 2>/dev/null; \
    ln -sf /usr/bin/prometheus /usr/local/bin/prometheus
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
