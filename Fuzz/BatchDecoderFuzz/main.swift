import FuzzDriver

runFuzzer { data, size in fuzzBatchDecoder(data!, size) }
