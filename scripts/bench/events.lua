-- wrk script: POST /v1/events with BATCH fresh events per request (unique ids per thread).
-- Usage: wrk -s scripts/bench/events.lua URL -- KEY BATCH RUNID [FUNNEL]
-- A realistic mix: events come ad by ad (an ad_loaded, its impression, a duplicate impression
-- from the SDK for one ad in six, a click for one in four, a second click on another asset
-- for one in twelve, an AdChoices impression for one in five, video play and end for one in
-- eight); with FUNNEL 1, each ad also comes from a load (the ad funnel, a bit over a third of
-- the events): its ad_request, an ad_failed first for one load in five (filled later), two
-- mediation networks' answers for one in four, and the ad_loaded naming the load with its
-- latency; occurrence times spread over the last day; ids half UUIDv7 (time-ordered), half
-- random v4; each request from one of 40 user agents of today's phones and browsers.
-- scripts/bench/plain-baseline.sql makes the same mix as rows for the plain \copy baseline.
local next_id = 1

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
end

function init(args)
  key = args[1]
  batch = tonumber(args[2]) or 100
  run = tonumber(args[3]) or 0
  funnel = tonumber(args[4] or "0") == 1
  math.randomseed(run * 1000 + tid)
  counter = 0
  ad = 0
  assets = {"MainImage", "Headline", "CallToAction", "Caption"}
  units = {"/1234/home/native", "/1234/feed/native", "/5678/article/native"}
  agents = {}
  for i = 1, 40 do
    agents[i] = string.format("Mozilla/5.0 (iPhone; CPU iPhone OS 17_%d like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 App/4.%d", i % 7, i)
  end
  pending = {}
end

local function id(n)
  if n % 2 == 0 then
    -- v7: 48 bits of milliseconds first, so ids of one moment sort together.
    local ms = os.time() * 1000 + n % 1000
    return string.format("%08x-%04x-7%03x-8%03x-%012x", math.floor(ms / 65536), ms % 65536, tid, run % 4096, n)
  end
  return string.format("%08x-%04x-4%03x-9%03x-%012x", math.random(0, 0x7fffffff), math.random(0, 0xffff), tid,
                       run % 4096, n)
end

-- The events of the next ad, queued.
local function nextAd()
  ad = ad + 1
  local unit = units[(ad % 3) + 1]
  local t = os.time() - math.random(1, 86400)
  local function stamp(offset) return os.date("!%Y-%m-%dT%H:%M:%S", t + offset) .. ".000Z" end
  local request = string.format("r%d-%d-%d", run, tid, ad)
  local function add(typ, offset, extra)
    pending[#pending + 1] = {typ = typ, at = stamp(offset), unit = unit, request = request, extra = extra or ""}
  end
  if funnel then
    local load = string.format("l%d-%d-%d", run, tid, ad)
    local function addLoad(typ, offset, extra)
      pending[#pending + 1] = {typ = typ, at = stamp(offset), unit = unit, load = load, extra = extra or ""}
    end
    addLoad("ad_request", -2, ',"adsRequested":1')
    if ad % 5 == 0 then addLoad("ad_failed", -1, ',"errorCode":"network_error","latencyMs":' .. math.random(50, 3000)) end
    if ad % 4 == 0 then
      addLoad("mediation_result", -1, ',"adapter":"Meta","position":1,"result":"failed","errorCode":"mediation_no_fill","latencyMs":' .. math.random(20, 900))
      addLoad("mediation_result", -1, ',"adapter":"AppLovin","position":2,"result":"loaded","latencyMs":' .. math.random(20, 900))
    end
    add("ad_loaded", 0, ',"loadId":"' .. load .. '","latencyMs":' .. math.random(30, 4000))
  else
    add("ad_loaded", 0)
  end
  add("impression", 2, (ad % 5 == 0) and ',"eea":true,"reservation":true' or "")
  if ad % 6 == 0 then add("impression", 3, ',"source":"sdk"') end
  if ad % 4 == 0 then add("click", 20, ',"assetKey":"' .. assets[(ad % 4) + 1] .. '"') end
  if ad % 12 == 0 then add("click", 40, ',"assetKey":"' .. assets[((ad + 1) % 4) + 1] .. '"') end
  if ad % 5 == 0 then add("adchoices_impression", 2) end
  if ad % 8 == 0 then add("video_play", 5); add("video_end", 35) end
end

function request()
  counter = counter + 1
  local parts = {}
  for i = 1, batch do
    if #pending == 0 then nextAd() end
    local e = table.remove(pending, 1)
    local n = counter * batch + i
    if e.load then
      parts[i] = string.format('{"id":"%s","type":"%s","loadId":"%s","adUnit":"%s","occurredAt":"%s"%s}',
        id(n), e.typ, e.load, e.unit, e.at, e.extra)
    else
      parts[i] = string.format('{"id":"%s","type":"%s","requestId":"%s","adUnit":"%s","formatId":"10063170","occurredAt":"%s"%s}',
        id(n), e.typ, e.request, e.unit, e.at, e.extra)
    end
  end
  local h = {["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json",
             ["User-Agent"] = agents[(counter % 40) + 1]}
  return wrk.format("POST", "/v1/events", h, '{"events":[' .. table.concat(parts, ",") .. ']}')
end

function done(summary, latency, requests)
  local statuses = summary.errors.status
  io.write(string.format("non-2xx responses: %d, socket errors: connect %d read %d write %d timeout %d\n",
    statuses, summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout))
end
