# Integration tests: real maitred, real grpcio upstreams and clients on
# 127.0.0.1 (tests/integration/run.sh; skipped only without python3-grpcio).
TESTS += tests/integration/run.sh
EXTRA_DIST += \
	tests/integration/run.sh \
	tests/integration/runall.py \
	tests/integration/harness.py \
	tests/integration/protogen.py \
	tests/integration/upstream.py \
	tests/integration/democlient.py \
	tests/integration/h2raw.py \
	tests/integration/test_calls.py \
	tests/integration/test_reload.py \
	tests/integration/test_reload_diff.py \
	tests/integration/test_churn.py \
	tests/integration/test_dns.py \
	tests/integration/test_metadata.py \
	tests/integration/test_errors.py \
	tests/integration/test_deadline_cancel.py \
	tests/integration/test_large_concurrent.py \
	tests/integration/test_tls.py \
	tests/integration/test_faults.py \
	tests/integration/test_fault_modes.py \
	tests/integration/test_fault_more.py \
	tests/integration/test_config_cli.py \
	tests/integration/test_drain.py \
	tests/integration/test_lb.py \
	tests/integration/test_lb_fleet.py \
	tests/integration/test_policy.py \
	tests/integration/test_tls_resume.py \
	tests/integration/test_hardening.py \
	tests/integration/test_pool.py \
	tests/integration/test_etcd.py \
	tests/integration/test_interop_go.py \
	tests/integration/test_interop_java.py \
	tests/integration/test_listen.py \
	tests/integration/test_isolation.py \
	tests/integration/test_conformance.py \
	tests/integration/test_robust.py \
	tests/integration/test_health.py \
	tests/integration/test_admin.py \
	tests/integration/test_deploy.py \
	tests/integration/test_io_defects.py \
	tests/integration/test_inbound.py \
	tests/integration/test_identity.py \
	tests/integration/test_tls_sessions.py \
	tests/integration/test_upstream_policy.py \
	tests/integration/test_identity_attack.py \
	tests/interop/goecho/main.go \
	tests/interop/javaecho/JavaEcho.java \
	protos/maitred/testing/v1/echo.proto \
	tests/valgrind.sh \
	tests/valgrind.supp \
	deploy/demo.sh \
	deploy/run-tests.sh \
	deploy/copy-sources.sh \
	deploy/tsan.sh \
	deploy/valgrind.sh
