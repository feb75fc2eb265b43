/* The embedded default configuration (mtd_cfg_load_file(NULL, ...)): what
 * deploy/demo.sh starts, three local upstream instances behind round robin. */
#include <config.h> /* autoconf (lib/config/config.h is the API) */

#include "config/config.h"

const char mtd_cfg_default_yaml[] = "# maitred embedded default configuration\n"
                                    "listen: \"127.0.0.1:15001\"\n"
                                    "workers: 1\n"
                                    "services:\n"
                                    "  - name: \"*\"\n"
                                    "    lb:\n"
                                    "      policy: ROUND_ROBIN\n"
                                    "    endpoints:\n"
                                    "      - address: \"127.0.0.1:50051\"\n"
                                    "      - address: \"127.0.0.1:50052\"\n"
                                    "      - address: \"127.0.0.1:50053\"\n";
