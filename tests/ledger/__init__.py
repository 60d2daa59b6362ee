# The ledger's tests, as a package of their own within tests/.
