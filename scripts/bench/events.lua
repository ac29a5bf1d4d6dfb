-- wrk script: POST /v1/events with BATCH fresh events per request (unique ids per thread).
-- Usage: wrk -s scripts/bench/events.lua URL -- KEY BATCH RUNID
-- Event mix per batch: 80% impressions, 10% clicks on 4 asset keys, 5% ad_loaded,
-- 5% AdChoices; a third of the impressions repeat an earlier ad (duplicate impressions).
local threads = {}
local next_id = 1

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  key = args[1]
  batch = tonumber(args[2]) or 100
  run = tonumber(args[3]) or 0
  counter = 0
  assets = {"MainImage", "Headline", "CallToAction", "Caption"}
  units = {"/1234/home/native", "/1234/feed/native", "/5678/article/native"}
  headers = {["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"}
end

function request()
  counter = counter + 1
  local now = os.time()
  local stamp = os.date("!%Y-%m-%dT%H:%M:%S", now - 1) .. ".000Z"
  local parts = {}
  for i = 1, batch do
    local n = counter * batch + i
    local ad = n
    local r = n % 20
    local typ, extra = "impression", ""
    if r == 0 or r == 1 then typ = "click"; extra = ',"assetKey":"' .. assets[(n % 4) + 1] .. '"'
    elseif r == 2 then typ = "ad_loaded"
    elseif r == 3 then typ = "adchoices_impression"; extra = ',"eea":true,"reservation":true'
    elseif r % 3 == 0 then ad = n - 1 end
    parts[i] = string.format(
      '{"id":"%08x-%04x-7000-8000-%012x","type":"%s","requestId":"b%d-%d-%d","adUnit":"%s","formatId":"10063170","occurredAt":"%s"%s}',
      run % 4294967296, tid, n, typ, run, tid, ad, units[(ad % 3) + 1], stamp, extra)
  end
  return wrk.format("POST", "/v1/events", headers, '{"events":[' .. table.concat(parts, ",") .. ']}')
end

function done(summary, latency, requests)
  local statuses = summary.errors.status
  io.write(string.format("non-2xx responses: %d, socket errors: connect %d read %d write %d timeout %d\n",
    statuses, summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout))
end
