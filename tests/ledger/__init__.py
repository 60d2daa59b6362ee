# A package, so that these test modules and their conftest have names of their
# own ("ledger.test_...") next to other test directories, for pytest and mypy.
