# docs/: written pages, plus the config reference generated from the
# comments of config.proto at build time (so it cannot drift from it).
noinst_DATA = docs/config-reference.md
CLEANFILES += docs/config-reference.md docs/config.descriptor.pb
EXTRA_DIST += docs/gen_config_ref.py docs/README.md docs/install.md docs/strategies.md \
	docs/metrics.md docs/troubleshooting.md docs/operating.md docs/architecture.md docs/tracing.md

DOCS_CONFIG_PROTO = maitred/config/v1/config.proto
docs/config-reference.md: $(srcdir)/protos/$(DOCS_CONFIG_PROTO) $(srcdir)/docs/gen_config_ref.py
	$(AM_V_GEN)mkdir -p docs && \
	$(PROTOC_C) -I$(srcdir)/protos -I$(PROTO_INCLUDE) --include_source_info \
		--descriptor_set_out=docs/config.descriptor.pb $(DOCS_CONFIG_PROTO) && \
	$(PYTHON) $(srcdir)/docs/gen_config_ref.py docs/config.descriptor.pb $(DOCS_CONFIG_PROTO) $@
EXTRA_DIST += deploy/kubernetes/cart.yaml deploy/systemd/maitred.service deploy/Dockerfile \
	deploy/examples/consistent-hash.yaml \
	deploy/examples/fault-broadcast.yaml \
	deploy/examples/fault-failback.yaml \
	deploy/examples/fault-failfast.yaml \
	deploy/examples/fault-fallback.yaml \
	deploy/examples/fault-failover.yaml \
	deploy/examples/traffic-policy.yaml \
	deploy/examples/fault-failsafe.yaml \
	deploy/examples/fault-forking.yaml \
	deploy/examples/least-active.yaml \
	deploy/examples/least-request.yaml \
	deploy/examples/maglev.yaml \
	deploy/examples/mesh-inbound.yaml \
	deploy/examples/peak-ewma.yaml \
	deploy/examples/random.yaml \
	deploy/examples/round-robin.yaml \
	deploy/examples/shortest-response.yaml \
	deploy/examples/smooth-weighted-round-robin.yaml \
	deploy/examples/tls-mtls.yaml \
	deploy/examples/weighted-random.yaml \
	deploy/examples/weighted-response-time.yaml \
	deploy/examples/weighted-round-robin.yaml
