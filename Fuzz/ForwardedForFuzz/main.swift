import FuzzDriver

runFuzzer { data, size in fuzzForwardedFor(data!, size) }
