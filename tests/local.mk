include tests/unit/local.mk
include tests/integration/local.mk
