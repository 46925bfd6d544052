# Stand-in for prom/alertmanager where no registry is reachable: Debian's package, the
# official image's entry point, default flags and paths.
ARG BASE=localhost/debian-py:bookworm
FROM ${BASE}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
      --no-install-recommends prometheus-alertmanager && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /alertmanager /etc/alertmanager
WORKDIR /alertmanager
EXPOSE 9093
ENTRYPOINT ["/usr/bin/prometheus-alertmanager"]
CMD ["--config.file=/etc/alertmanager/alertmanager.yml", "--storage.path=/alertmanager"]
