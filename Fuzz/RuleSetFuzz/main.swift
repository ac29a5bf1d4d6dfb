import FuzzDriver

runFuzzer { data, size in fuzzRuleSet(data!, size) }
