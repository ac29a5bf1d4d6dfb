import FuzzDriver

runFuzzer { data, size in fuzzReportQuery(data!, size) }
