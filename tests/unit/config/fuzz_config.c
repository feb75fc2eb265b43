/* libFuzzer target for the config loader: YAML, JSON and binary protobuf
 * (format sniffed from the content, as for a file without extension).
 * Not built by `make`; by hand, from the top of a configured tree:
 *
 *   clang -g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined \
 *     -I. -Ilib -Igen tests/unit/config/fuzz_config.c lib/config/[a-z]*.c \
 *     lib/lb/[a-z]*.c gen/maitred/config/v1/config.pb-c.c \
 *     gen/google/protobuf/duration.pb-c.c gen/google/protobuf/wrappers.pb-c.c \
 *     $(pkg-config --cflags --libs yaml-0.1 libprotobuf-c libcrypto) -lm \
 *     -o fuzz_config
 *   ./fuzz_config -max_len=4096 CORPUS_DIR tests/unit/config/fixtures \
 *     deploy
 *
 * Host names are not resolved (numeric only), so no input waits on DNS. */
#include <config.h> /* autoconf */

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "config/config-int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mtd_cfg *cfg = NULL;
	struct mtd_cfg_errors errs = {0};

	mtd_cfg__numeric_hosts_only(true);
	mtd_cfg_load_buffer("fuzz", data, size, MTD_CFG_FORMAT_AUTO, &cfg, &errs);
	mtd_cfg_free(cfg);
	mtd_cfg_errors_clear(&errs);
	return 0;
}
