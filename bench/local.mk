include bench/lb/local.mk
include bench/proxy/local.mk
