import FuzzDriver

runFuzzer { data, size in fuzzReconciliationImport(data!, size) }
