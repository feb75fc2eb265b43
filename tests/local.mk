include tests/unit/local.mk
include tests/integration/local.mk

# The layering rules (lib/ never includes sidecar/, io/ never call/).
TESTS += tests/layers.sh
EXTRA_DIST += tests/layers.sh
