/* libFuzzer target for the config loader (lib/config: YAML, JSON and
 * binary protobuf -> validated struct mtd_cfg).
 *
 * Byte 0 picks the format (AUTO, YAML, JSON, BINARY); the rest is the file.
 * A load either succeeds with a config and no errors, or fails with at least
 * one error message and no config; either way nothing leaks (LeakSanitizer).
 * getaddrinfo is wrapped (fuzz/build.sh links with --wrap) so host names in
 * fuzzed input are refused instead of reaching a resolver. */
#include <errno.h>
#include <netdb.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);
int __real_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res);
int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res);

int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
	struct addrinfo h = {0};
	if (hints)
		h = *hints;
	h.ai_flags |= AI_NUMERICHOST | AI_NUMERICSERV;
	return __real_getaddrinfo(node, service, &h, res);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	mtd_log_threshold = MTD_LOG_ERROR + 1; /* the loader's warnings are not findings */
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum mtd_cfg_format fmts[] = {MTD_CFG_FORMAT_AUTO, MTD_CFG_FORMAT_YAML, MTD_CFG_FORMAT_JSON,
	                                           MTD_CFG_FORMAT_BINARY};
	if (size < 1)
		return 0;
	struct mtd_cfg *cfg = NULL;
	struct mtd_cfg_errors errs = {0};
	int rc = mtd_cfg_load_buffer("fuzz.yaml", data + 1, size - 1, fmts[data[0] & 3], &cfg, &errs);
	if (rc == 0 && (!cfg || errs.n != 0))
		abort();
	if (rc != 0 && (cfg || (rc == -EINVAL && errs.n == 0)))
		abort();
	for (size_t i = 0; i < errs.n; i++)
		if (!errs.msgs[i] || !errs.msgs[i][0])
			abort();
	mtd_cfg_free(cfg);
	mtd_cfg_errors_clear(&errs);
	return 0;
}
