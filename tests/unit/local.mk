# The unit test programs are registered by each lib/ module's local.mk.
# `make check-valgrind` runs every one under valgrind (on a build without
# ASan: the two do not mix); any error or leak fails it. tests/valgrind.sh
# runs the quick ones and integration files (CI's valgrind stage).
UNIT_TESTS_VALGRIND = $(filter tests/unit/%,$(check_PROGRAMS))

check-valgrind: $(UNIT_TESTS_VALGRIND)
	@fail=0; for t in $(UNIT_TESTS_VALGRIND); do \
	  if MAITRED_SRCDIR=$(abs_srcdir) CK_FORK=no valgrind -q --error-exitcode=9 --leak-check=full \
	       --errors-for-leak-kinds=definite,indirect --suppressions=$(abs_srcdir)/tests/valgrind.supp ./$$t >$$t.vg.log 2>&1; \
	  then echo "PASS (valgrind): $$t"; \
	  else echo "FAIL (valgrind): $$t (see $$t.vg.log)"; fail=1; fi; \
	done; exit $$fail
.PHONY: check-valgrind
