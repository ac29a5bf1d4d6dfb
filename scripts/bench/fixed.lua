-- wrk script: the same request every time, to profile one path through the server.
-- Usage: wrk -s scripts/bench/fixed.lua URL -- METHOD PATH [KEY BODY]
-- With KEY and BODY, a JSON body sent with the key as a bearer token (as events.lua sends it).
function init(args)
  local headers = {["User-Agent"] = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 App/4.1"}
  if args[3] then
    headers["Authorization"] = "Bearer " .. args[3]
    headers["Content-Type"] = "application/json"
  end
  req = wrk.format(args[1], args[2], headers, args[4])
end

function request()
  return req
end

function done(summary, latency, requests)
  io.write(string.format("non-2xx responses: %d, socket errors: connect %d read %d write %d timeout %d\n",
    summary.errors.status, summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout))
end
