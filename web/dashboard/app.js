// The tracker's dashboard: reads the JSON reports API, an ad's audit trail and the
// reconciliations with Ad Manager with a report key kept in the tab's sessionStorage (sent
// only in the Authorization header) and draws what they answer. The filters live in the
// URL's fragment (shareable, kept over a reload, never sent to the server); the key never does.
// Every value from the server is put into the page as text (textContent), never as HTML:
// ad units and asset keys come from apps and may hold anything.
'use strict';

(() => {
  const storageKey = 'tracker.reportKey';
  // The invalid-traffic labels in the order the rules decide them (docs/REPORTS.md).
  const ivtLabels = [
    ['declared_bot', 'declared crawler or bot: the user agent matches a pattern'],
    ['datacenter', 'data-center traffic: the address is inside a range'],
    ['high_rate', 'more events from one address and user agent in a minute than the limit'],
    ['excessive_clicks', "an ad's counted clicks beyond maxClicksPerAd"],
  ];
  // What each errorCode of a failed load means: the GADErrorCode case it stands for
  // (docs/PROTOCOL.md section 10), in the SDK documentation's words.
  const errorMeanings = {
    no_fill: 'the request succeeded, but no ad was returned',
    network_error: 'the ads could not be loaded from the network',
    timeout: 'the request timed out before it was answered',
    server_error: 'the ad server failed to process the request',
    invalid_request: 'the request was invalid, typically a missing ad unit ID or root view controller',
    invalid_argument: 'an argument of the request was invalid',
    received_invalid_response: 'the response from the ad server was invalid',
    mediation_no_fill: 'the mediation request succeeded, but no network of the waterfall returned an ad',
    mediation_adapter_error: 'a mediation network adapter could not be found or created',
    mediation_data_error: 'the mediation response was invalid',
    mediation_invalid_ad_size: 'an ad size the mediation network adapter cannot take',
    internal_error: 'an internal error of the SDK',
    ad_already_used: 'the ad object had already been used',
    os_version_too_low: "the device's OS is below the SDK's minimum version",
    application_identifier_missing: "the app's application identifier is missing (GADApplicationIdentifier in Info.plist)",
    other: 'another error',
  };
  // The IAB's convention between a third-party count and the publisher's ad server, in %.
  const defaultThreshold = '10';
  // A tolerance in % as typed: 0 to 10 000 (the API takes 0 to 100 as a fraction).
  const thresholdPattern = /^\d{1,5}(\.\d{1,4})?$/;
  const colors = {
    impressions: '#2f6fb0', clicks: '#e07b00', ctr: '#2a9d5c', requests: '#5b6773', filled: '#7fa8d6', shown: '#2a9d5c',
    attributed: '#2a9d5c', noImpression: '#c0392b', beforeImpression: '#8e44ad', outsideWindow: '#7f8c8d',
  };
  // A range of up to this many days is charted by hour; longer ones by day.
  const hourlyMaxDays = 7;
  // The reports API's longest range (docs/REPORTS.md, "Parameters").
  const maxDays = 366;
  // The names under which the reports API writes an hour's offset as "Z" (ReportQuery.utcNames).
  const utcNames = new Set(['UTC', 'Etc/UTC', 'Etc/UCT', 'UCT', 'Etc/Universal', 'Universal', 'Etc/Zulu', 'Zulu']);
  // CLDR's identifier of a zone (what an ICU-based browser such as Chromium reports, and what
  // it answers even when given the current name) to the tz database's current name of the
  // same place: every zone whose two names differ. Zones that only share another's rules
  // (Europe/Bratislava, a link to Europe/Prague) keep their own names.
  const renamedZones = {
    'Africa/Asmera': 'Africa/Asmara', 'America/Buenos_Aires': 'America/Argentina/Buenos_Aires',
    'America/Catamarca': 'America/Argentina/Catamarca', 'America/Coral_Harbour': 'America/Atikokan',
    'America/Cordoba': 'America/Argentina/Cordoba', 'America/Godthab': 'America/Nuuk',
    'America/Indianapolis': 'America/Indiana/Indianapolis', 'America/Jujuy': 'America/Argentina/Jujuy',
    'America/Louisville': 'America/Kentucky/Louisville', 'America/Mendoza': 'America/Argentina/Mendoza',
    'Asia/Calcutta': 'Asia/Kolkata', 'Asia/Katmandu': 'Asia/Kathmandu', 'Asia/Rangoon': 'Asia/Yangon',
    'Asia/Saigon': 'Asia/Ho_Chi_Minh', 'Atlantic/Faeroe': 'Atlantic/Faroe', 'Europe/Kiev': 'Europe/Kyiv',
    'Pacific/Enderbury': 'Pacific/Kanton', 'Pacific/Ponape': 'Pacific/Pohnpei', 'Pacific/Truk': 'Pacific/Chuuk',
  };
  const dayPattern = /^(\d{4})-(\d{2})-(\d{2})$/;
  const timePattern = /^(\d{4}-\d{2}-\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
  const $ = (id) => document.getElementById(id);
  const charts = {};
  const seen = { adUnits: new Set(), formatIds: new Set() };
  let reportsGeneration = 0;
  let adGeneration = 0;
  let recGeneration = 0;
  // What the page shows (or is loading), as fragment text, so that going back from an ad
  // or a repeated hashchange does not ask the server again.
  let reportsShown = null;
  let adShown = null;
  let recShown = null;
  // The filters of the reports on the page, for the CSV downloads.
  let shownState = null;
  // The reconciliation report on the page (import, tolerance, its days and zone), for its CSV.
  let recShownQuery = null;

  /** A key the server refused (401/403): the user has to enter another. */
  class KeyRefused extends Error {}

  const integer = (n) => n.toLocaleString('en-US');
  const percent = (ratio) => (ratio * 100).toFixed(1) + ' %';
  /** A latency percentile of the API (a bucket bound in ms), – without latencies (null). */
  const milliseconds = (ms) => (ms === null || ms === undefined ? '–' : integer(ms) + ' ms');
  const ctrText = (ratio) => (ratio === null ? '–' : percent(ratio));
  /** A discrepancy with its sign ("-25.0 %", "+4.2 %"); none without Ad Manager's count. */
  const signedPercent = (d) => (d === null ? '–' : (d > 0 ? '+' : d < 0 ? '-' : '') + Math.abs(d * 100).toFixed(1) + ' %');
  const pad = (n) => String(n).padStart(2, '0');
  const isoDay = (date) => date.toISOString().slice(0, 10);

  // ---- Days, zones and hours -------------------------------------------------------------

  /** Whether `text` is a real calendar day written YYYY-MM-DD. */
  function isDay(text) {
    const m = dayPattern.exec(text);
    if (!m) return false;
    const date = new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3])));
    return Number(m[1]) >= 1000 && isoDay(date) === text;
  }

  function addDays(day, n) {
    const date = new Date(day + 'T00:00:00Z');
    date.setUTCDate(date.getUTCDate() + n);
    return isoDay(date);
  }

  function spanDays(from, to) {
    return Math.round((Date.parse(to + 'T00:00:00Z') - Date.parse(from + 'T00:00:00Z')) / 86400000) + 1;
  }

  function daysBetween(from, to) {
    const days = [];
    for (let day = from; day <= to && days.length <= maxDays; day = addDays(day, 1)) days.push(day);
    return days;
  }

  /**
   * A zone by the tz database's current name. Chromium and other browsers built on ICU name
   * zones by CLDR's identifiers, which keep the name a zone had when CLDR first listed it
   * (a browser in India reports Asia/Calcutta), while the tz database renamed them. The
   * server cannot decide for the page: PostgreSQL knows both names (the old ones as links)
   * and the reports echo the name they are given. So the page writes every zone it shows,
   * sends and puts in the URL or a file name by its current name, whether it came from the
   * browser, the URL or the form.
   */
  function currentZone(name) {
    return Object.hasOwn(renamedZones, name) ? renamedZones[name] : name;
  }

  function browserZone() {
    try {
      return currentZone(Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC');
    } catch (_) {
      return 'UTC';
    }
  }

  // The deployment's default zone (TRACKER_DEFAULT_TZ, from /dashboard/settings.json); '' when
  // it has none.
  let deploymentZone = '';

  /**
   * The zone the page starts in when the URL names none: the deployment's, so that everyone
   * reading one tracker sees the same days as its API and command line, else the browser's.
   */
  function startingZone() {
    return deploymentZone || browserZone();
  }

  /** Reads the deployment's default zone; without an answer the page starts in the browser's zone. */
  async function loadSettings() {
    try {
      const response = await fetch('/dashboard/settings.json', { cache: 'no-cache' });
      if (!response.ok) return;
      const settings = await response.json();
      if (typeof settings.defaultTimeZone === 'string' && settings.defaultTimeZone) {
        deploymentZone = currentZone(settings.defaultTimeZone);
      }
    } catch (_) {
      deploymentZone = '';
    }
  }

  const clocks = new Map();
  /** A formatter of the zone's wall clock, or null when this browser does not know the zone. */
  function clock(zone) {
    if (!clocks.has(zone)) {
      let format = null;
      try {
        format = new Intl.DateTimeFormat('en-US', {
          timeZone: zone, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit',
          hour: '2-digit', minute: '2-digit', second: '2-digit',
        });
      } catch (_) {
        format = null;
      }
      clocks.set(zone, format);
    }
    return clocks.get(zone);
  }

  /** The zone's wall clock at instant `ms`: its day, hour, minute, second and UTC offset. */
  function wallClock(zone, ms) {
    const parts = {};
    for (const part of clock(zone).formatToParts(new Date(ms))) parts[part.type] = part.value;
    const hour = parts.hour === '24' ? '00' : parts.hour;
    const local = Date.UTC(Number(parts.year), Number(parts.month) - 1, Number(parts.day),
      Number(hour), Number(parts.minute), Number(parts.second));
    return {
      day: parts.year + '-' + parts.month + '-' + parts.day, hour, minute: parts.minute, second: parts.second,
      offsetMinutes: Math.round((local - Math.floor(ms / 1000) * 1000) / 60000),
    };
  }

  /** An offset as the reports API writes it: "Z" in UTC, else ±hh:mm. */
  function offsetText(minutes, zone) {
    if (utcNames.has(zone)) return 'Z';
    const size = Math.abs(minutes);
    return (minutes < 0 ? '-' : '+') + pad(Math.floor(size / 60)) + ':' + pad(size % 60);
  }

  /** Today in the zone (in UTC when this browser does not know the zone). */
  function today(zone) {
    return clock(zone) ? wallClock(zone, Date.now()).day : isoDay(new Date());
  }

  /**
   * Every local hour of the days from..to in the zone, labelled as the reports API labels
   * them: the clock's hour with the zone's offset then, so the repeated hour of a fall-back
   * day is two hours and the skipped one of a spring-forward day none. Offsets are whole
   * quarter hours, so the zone's clock is read every UTC quarter hour of the range.
   */
  function hoursOf(from, to, zone) {
    if (!clock(zone)) return [];
    const labels = [];
    const known = new Set();
    const hour = 3600000;
    const end = Date.parse(to + 'T00:00:00Z') + 39 * hour; // offsets lie within -12 h and +14 h
    for (let t = Date.parse(from + 'T00:00:00Z') - 15 * hour; t < end; t += hour / 4) {
      const wall = wallClock(zone, t);
      if (wall.day < from || wall.day > to) continue;
      const label = wall.day + 'T' + wall.hour + ':00:00' + offsetText(wall.offsetMinutes, zone);
      if (!known.has(label)) {
        known.add(label);
        labels.push(label);
      }
    }
    return labels;
  }

  /** An RFC 3339 time of the API as the zone's local time, in the same notation. */
  function localTime(text, zone) {
    const m = timePattern.exec(text || '');
    if (!m || !clock(zone)) return text || '–';
    const wall = wallClock(zone, Date.parse(m[1] + 'T' + m[2] + ':' + m[3] + ':' + m[4] + m[6]));
    // A fraction of a second as far as it is not zeros: .500000 is .5, .000000 none.
    const partOfSecond = (m[5] || '').replace(/\.?0+$/, '');
    return wall.day + 'T' + wall.hour + ':' + wall.minute + ':' + wall.second + partOfSecond + offsetText(wall.offsetMinutes, zone);
  }

  // ---- The filters and the URL ------------------------------------------------------------

  /** Whether `text` is a tolerance in % the API can take (0 to 10 000, up to 4 decimals). */
  function validThreshold(text) {
    return thresholdPattern.test(text) && Number(text) <= 10000;
  }

  /** A tolerance in % as the API's fraction: 10 is 0.1. */
  function thresholdFraction(text) {
    return String(Number(text) / 100);
  }

  function defaults() {
    const tz = startingZone();
    const to = today(tz);
    return {
      from: addDays(to, -6), to, tz, adUnit: '', formatId: '', includeTest: false, compare: false, ad: '',
      view: '', import: '', threshold: defaultThreshold,
    };
  }

  /** The state the URL's fragment names; what it leaves out (or gets wrong) is the default. */
  function readHash() {
    const hash = new URLSearchParams(location.hash.replace(/^#/, ''));
    const state = defaults();
    if (hash.get('tz')) state.tz = currentZone(hash.get('tz'));
    const from = hash.get('from');
    const to = hash.get('to');
    if (isDay(from || '') && isDay(to || '') && from <= to) {
      state.from = from;
      state.to = to;
    } else {
      state.to = today(state.tz);
      state.from = addDays(state.to, -6);
    }
    state.adUnit = hash.get('adUnit') || '';
    state.formatId = hash.get('formatId') || '';
    state.includeTest = hash.get('includeTest') === 'true';
    state.compare = hash.get('compare') === 'true';
    state.ad = hash.get('ad') || '';
    state.view = hash.get('view') === 'reconciliation' ? 'reconciliation' : '';
    state.import = hash.get('import') || '';
    if (validThreshold(hash.get('threshold') || '')) state.threshold = hash.get('threshold');
    return state;
  }

  function hashOf(state) {
    const params = new URLSearchParams();
    params.set('from', state.from);
    params.set('to', state.to);
    params.set('tz', state.tz);
    if (state.adUnit) params.set('adUnit', state.adUnit);
    if (state.formatId) params.set('formatId', state.formatId);
    if (state.includeTest) params.set('includeTest', 'true');
    if (state.compare) params.set('compare', 'true');
    if (state.ad) params.set('ad', state.ad);
    // The reconciliation's choices are in the URL only in its view: the reports' links stay as they were.
    if (state.view) params.set('view', state.view);
    if (state.view === 'reconciliation') {
      if (state.import) params.set('import', state.import);
      params.set('threshold', state.threshold);
    }
    return '#' + params.toString();
  }

  /** Puts the state into the URL: a new history entry (Back undoes it), or in place. */
  function writeHash(state, replace) {
    const hash = hashOf(state);
    if (hash === location.hash) return;
    if (replace) history.replaceState(null, '', hash); else history.pushState(null, '', hash);
  }

  function showFields(state) {
    $('from').value = state.from;
    $('to').value = state.to;
    $('tz').value = state.tz;
    $('ad-unit').value = state.adUnit;
    $('format-id').value = state.formatId;
    $('include-test').checked = state.includeTest;
    $('compare').checked = state.compare;
  }

  function fieldsState() {
    return {
      from: $('from').value.trim(), to: $('to').value.trim(), tz: currentZone($('tz').value.trim()),
      adUnit: $('ad-unit').value.trim(), formatId: $('format-id').value.trim(),
      includeTest: $('include-test').checked, compare: $('compare').checked, ad: '',
      view: '', import: '', threshold: defaultThreshold,
    };
  }

  /** Checks the form as the API would, saying what is wrong next to the field. */
  function validFields() {
    const from = $('from');
    const to = $('to');
    const tz = $('tz');
    for (const input of [from, to, tz]) input.setCustomValidity('');
    for (const input of [from, to]) {
      const value = input.value.trim();
      if (!isDay(value)) input.setCustomValidity('A day as YYYY-MM-DD, e.g. ' + today('UTC') + '.');
    }
    if (from.validity.valid && to.validity.valid) {
      const span = spanDays(from.value.trim(), to.value.trim());
      if (span < 1) to.setCustomValidity('To must not be before From.');
      else if (span > maxDays) to.setCustomValidity('At most ' + maxDays + ' days at once.');
    }
    if (!tz.value.trim()) tz.setCustomValidity('An IANA time zone such as UTC or America/New_York.');
    return $('filters').reportValidity();
  }

  /** The days of a range preset, counted from today's date in the zone. */
  function presetRange(preset, zone) {
    const to = today(zone);
    const firstOfMonth = to.slice(0, 8) + '01';
    const lastMonthEnd = addDays(firstOfMonth, -1);
    return {
      'today': { from: to, to },
      'yesterday': { from: addDays(to, -1), to: addDays(to, -1) },
      'last-7-days': { from: addDays(to, -6), to },
      'last-30-days': { from: addDays(to, -29), to },
      'this-month': { from: firstOfMonth, to },
      'last-month': { from: lastMonthEnd.slice(0, 8) + '01', to: lastMonthEnd },
    }[preset];
  }

  /** Shows the reports for the filters in the form, as a new history entry. */
  function applyFields() {
    if (!validFields()) return;
    const state = fieldsState();
    writeHash(state, false);
    reportsShown = null; // Apply always asks again, even for the same filters
    route();
  }

  // ---- Views ----------------------------------------------------------------------------

  function showKeyPanel(message) {
    $('key-panel').hidden = false;
    $('dashboard').hidden = true;
    $('ad-view').hidden = true;
    $('rec-view').hidden = true;
    $('views').hidden = true;
    $('ad-form').hidden = true;
    $('forget').hidden = true;
    $('lag').hidden = true;
    document.body.dataset.state = 'locked';
    document.body.dataset.view = 'key';
    reportsShown = null;
    adShown = null;
    recShown = null;
    const error = $('key-error');
    error.hidden = !message;
    error.textContent = message || '';
    $('key').focus();
  }

  function showView(view) {
    $('key-panel').hidden = true;
    $('forget').hidden = false;
    $('ad-form').hidden = false;
    $('views').hidden = false;
    $('dashboard').hidden = view !== 'reports';
    $('ad-view').hidden = view !== 'ad';
    $('rec-view').hidden = view !== 'reconciliation';
    // An ad's trail is reached from the reports, so "Reports" stays the current tab there.
    for (const button of document.querySelectorAll('#views [data-view]')) {
      if (button.dataset.view === (view === 'reconciliation' ? 'reconciliation' : 'reports')) button.setAttribute('aria-current', 'page');
      else button.removeAttribute('aria-current');
    }
    document.body.dataset.view = view;
    if (document.body.dataset.state === 'locked') document.body.dataset.state = 'idle';
  }

  /** Shows what the URL names: the reports for its filters, one ad's audit trail, or a reconciliation. */
  function route() {
    const key = sessionStorage.getItem(storageKey);
    if (!key) { showKeyPanel(); return; }
    const state = readHash();
    showFields(state);
    writeHash(state, true); // the URL always names what is shown, defaults included
    if (state.ad) {
      showView('ad');
      $('ad-back').textContent = state.view === 'reconciliation' ? '← Back to the reconciliation' : '← Back to the reports';
      const shown = hashOf(state);
      if (shown !== adShown) loadAd(state, key);
    } else if (state.view === 'reconciliation') {
      showView('reconciliation');
      const shown = hashOf(state);
      if (shown !== recShown) loadReconciliation(state, key);
    } else {
      showView('reports');
      const shown = hashOf(state);
      if (shown !== reportsShown) loadReports(state, key);
    }
  }

  function keyRefused(error) {
    sessionStorage.removeItem(storageKey);
    showKeyPanel('The server refused the key: ' + error.message);
  }

  // ---- Reading the API ------------------------------------------------------------------

  async function fetchAPI(path, key, accept) {
    const response = await fetch(path, {
      headers: { Authorization: 'Bearer ' + key, Accept: accept || 'application/json' },
      cache: 'no-store',
      credentials: 'omit',
      referrerPolicy: 'no-referrer',
    });
    if (response.status === 401 || response.status === 403) {
      const body = await response.json().catch(() => null);
      throw new KeyRefused(body && body.message ? body.message : 'the key was refused');
    }
    return response;
  }

  // The form's names of the API's parameters, for a message that starts with one.
  const parameterNames = {
    tz: 'the time zone', from: 'From', to: 'To', adUnit: 'the ad unit', formatId: 'the format',
    threshold: 'the tolerance', includeTest: 'include test traffic',
  };

  /**
   * What a refused or failed request means to the user, as one sentence: the server's
   * message (which names the field and the rule) in the form's words, never its error code,
   * and the same whichever of a page's requests it came from.
   */
  async function errorOf(response) {
    const body = await response.json().catch(() => null);
    const message = body && typeof body.message === 'string' ? body.message.replace(/[.\s]+$/, '') : '';
    if (response.status >= 400 && response.status < 500 && response.status !== 429 && message) {
      const parameter = /^(\w+) /.exec(message);
      const named = parameter && Object.hasOwn(parameterNames, parameter[1])
        ? parameterNames[parameter[1]] + message.slice(parameter[1].length) : message;
      return new Error('The server cannot answer for these filters: ' + named + '.');
    }
    return new Error('The server could not answer just now (' + (message || 'HTTP ' + response.status) + '): try again in a moment.');
  }

  /** An error as the page shows it: a fetch that never reached the server says so. */
  function errorText(error) {
    return error instanceof TypeError ? 'The server could not be reached: check the connection and try again.' : error.message;
  }

  async function fetchReport(name, params, key) {
    const response = await fetchAPI('/v1/reports/' + name + '?' + params, key);
    if (!response.ok) throw await errorOf(response);
    const body = await response.json();
    return Object.assign({ rows: body.rows, tz: body.tz || 'UTC', ivtRules: body.ivtRules }, lagOf(response));
  }

  function lagOf(response) {
    return {
      lagEvents: Number(response.headers.get('X-Projection-Lag-Events') || 0),
      lagSeconds: Number(response.headers.get('X-Projection-Lag-Seconds') || 0),
    };
  }

  /**
   * The rule sets of /readyz ({projections, newest}), or null when it does not say (not
   * ready, or no connection of the node may read them): only the "a newer rule set waits"
   * notice depends on it, never a number.
   */
  async function readiness() {
    try {
      const response = await fetch('/readyz', { cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' });
      if (!response.ok) return null;
      const body = await response.json();
      return body && body.ivtRules ? body.ivtRules : null;
    } catch (_) {
      return null;
    }
  }

  /** The report parameters of a state (and another range, for the previous period). */
  function reportParams(state, range) {
    const params = new URLSearchParams();
    params.set('from', (range || state).from);
    params.set('to', (range || state).to);
    if (state.adUnit) params.set('adUnit', state.adUnit);
    if (state.formatId) params.set('formatId', state.formatId);
    params.set('includeTest', state.includeTest ? 'true' : 'false');
    params.set('tz', state.tz);
    return params;
  }

  const hourly = (state) => spanDays(state.from, state.to) <= hourlyMaxDays;

  /** The same number of days just before the range. */
  function previousRange(state) {
    const span = spanDays(state.from, state.to);
    return { from: addDays(state.from, -span), to: addDays(state.from, -1) };
  }

  /**
   * What one load of the reports view asks, as `key` of the answers: the report, by hour for
   * a short range (`byHour`), or the previous period's (`previous`, only to compare). The
   * order is the order in which failures are told: the page says the first failure of this
   * list, whichever answered first. A report tab to come adds its request here and its
   * tables to `reportTables`.
   */
  const reportRequests = [
    { key: 'summary', report: 'summary', byHour: true },
    { key: 'assets', report: 'assets' },
    { key: 'sources', report: 'sources' },
    { key: 'adchoices', report: 'adchoices' },
    { key: 'ivt', report: 'ivt' },
    { key: 'funnel', report: 'funnel' },
    { key: 'failures', report: 'failures' },
    { key: 'waterfall', report: 'waterfall' },
    { key: 'previousSummary', report: 'summary', previous: true },
    { key: 'previousAdchoices', report: 'adchoices', previous: true },
  ];

  function requestParams(request, state) {
    const params = reportParams(state, request.previous ? previousRange(state) : null);
    if (request.byHour && hourly(state)) params.set('granularity', 'hour');
    return params;
  }

  async function loadReports(state, key) {
    const mine = ++reportsGeneration;
    reportsShown = hashOf(state);
    // Until the answers are in, the figures of other filters are not shown (the style sheet
    // hides them in this state, keeping their place so the page does not jump).
    document.body.dataset.state = 'loading';
    const status = $('status');
    status.className = '';
    status.textContent = 'Loading…';
    const rules = readiness();
    const asked = reportRequests.filter((request) => !request.previous || state.compare);
    // Every request is let finish, so that the failure told does not depend on which came first.
    const settled = await Promise.allSettled(asked.map((request) => fetchReport(request.report, requestParams(request, state), key)));
    const ready = await rules;
    if (mine !== reportsGeneration) return;
    const failures = settled.filter((s) => s.status === 'rejected').map((s) => s.reason);
    if (failures.length) {
      reportsShown = null;
      blankReports();
      const refused = failures.find((error) => error instanceof KeyRefused);
      if (refused) { keyRefused(refused); return; }
      status.className = 'error';
      status.textContent = errorText(failures[0]);
      document.body.dataset.state = 'error';
      return;
    }
    const data = Object.fromEntries(asked.map((request, i) => [request.key, settled[i].value]));
    renderReports(state, data, ready);
    showLag(Object.values(data));
    const filters = [];
    if (state.adUnit) filters.push('ad unit ' + state.adUnit);
    if (state.formatId) filters.push('format ' + state.formatId);
    if (state.includeTest) filters.push('test traffic included');
    const previous = previousRange(state);
    status.textContent = 'From ' + state.from + ' to ' + state.to + ' (local days in ' + data.summary.tz +
      (hourly(state) ? ', by hour' : ', by day') + ')' + (filters.length ? ', ' + filters.join(', ') : '') + '.' +
      (state.compare ? ' Compared with ' + previous.from + ' to ' + previous.to + '.' : '');
    shownState = state;
    for (const button of document.querySelectorAll('[data-csv]')) button.disabled = false;
    document.body.dataset.state = 'ready';
  }

  /**
   * Empties every figure of the reports view: tiles, changes, tables, charts, the zone in the
   * headings, the lag and the CSV buttons. After a failed load nothing of other filters stays
   * beside the filters in the form and the URL.
   */
  function blankReports() {
    for (const output of document.querySelectorAll('#dashboard output')) {
      output.textContent = '–';
      output.className = '';
    }
    for (const detail of document.querySelectorAll('#dashboard .tile .detail')) {
      detail.textContent = '';
      detail.className = 'detail';
    }
    for (const [id] of tiles) {
      const change = $('change-' + id);
      change.hidden = true;
      change.textContent = '';
      change.className = 'change';
    }
    for (const table of reportTables) {
      const element = $(table.id);
      element.tBodies[0].replaceChildren();
      if (element.tFoot) element.tFoot.replaceChildren();
    }
    for (const id of Object.keys(charts)) {
      charts[id].destroy();
      delete charts[id];
      $(id).parentElement.style.minWidth = '';
      $(id).closest('.chart-box').hidden = true;
    }
    $('time-heading').textContent = 'Impressions, clicks and CTR over time';
    $('ivt-waiting').hidden = true;
    $('ivt-none').hidden = true;
    $('ivt-labels').hidden = false;
    $('lag').hidden = true;
    shownState = null;
    for (const button of document.querySelectorAll('[data-csv]')) button.disabled = true;
  }

  // ---- Drawing the reports --------------------------------------------------------------

  function sumBy(rows, keyOf, fields) {
    const groups = new Map();
    for (const row of rows) {
      const key = keyOf(row);
      let group = groups.get(key);
      if (!group) {
        group = { key, first: row };
        for (const f of fields) group[f] = 0;
        groups.set(key, group);
      }
      for (const f of fields) group[f] += row[f];
    }
    return groups;
  }

  /** The groups of `sumBy` as rows: the dimensions of each group's first row, the summed fields. */
  function grouped(rows, dimensions, fields) {
    return [...sumBy(rows, (r) => dimensions.map((d) => r[d]).join('\u0000'), fields).values()]
      .map((g) => Object.assign({}, ...dimensions.map((d) => ({ [d]: g.first[d] })), ...fields.map((f) => ({ [f]: g[f] }))));
  }

  /** Compares rows by their fields in turn: a number by its value, text by its UTF-16 code units. */
  const byFields = (...fields) => (a, b) => {
    for (const field of fields) {
      if (a[field] < b[field]) return -1;
      if (a[field] > b[field]) return 1;
    }
    return 0;
  };

  function total(rows, field) {
    return rows.reduce((sum, row) => sum + row[field], 0);
  }

  /** A ratio of [numerator, denominator]; none (null) without a denominator. */
  const fraction = ([numerator, denominator]) => (denominator ? numerator / denominator : null);

  function cell(row, text, column, numeric) {
    const td = document.createElement('td');
    td.textContent = text;
    if (column) td.dataset.col = column;
    if (numeric) td.className = 'num';
    row.appendChild(td);
    return td;
  }

  // The columns of a table. `key` is the row's field and the cell's data-col, `label` its
  // heading. A text column may hold a button that filters the page by its value (`filter`:
  // adUnit, formatId, or day: that day by hour) or be drawn by `render(td, row)`; a count is
  // summed in the totals row; a ratio is `of(row)`, [numerator, denominator] of the row's
  // counts, and in the totals row of the summed counts: never an average of the rows' ratios,
  // and – where there is no denominator. `value(row)` shows a row's ratio as the API gave it.
  // A measure (a latency percentile) is shown as the API gave it and cannot be summed: its
  // totals cell is –, as is a row's null.
  const textColumn = (key, label, options) => Object.assign({ key, label, kind: 'text' }, options);
  const countColumn = (key, label, options) => Object.assign({ key, label, kind: 'count' }, options);
  const ratioColumn = (key, label, of, options) => Object.assign({ key, label, kind: 'ratio', of, format: ctrText }, options);
  const latencyColumn = (key, label) => ({ key, label, kind: 'measure', format: milliseconds });
  const filterTitle = { day: 'Show this day by hour', adUnit: 'Show only this ad unit', formatId: 'Show only this format' };

  /** A button that reads as a link in a table: its content, what it does, and its data attributes. */
  function linkButton(content, title, data) {
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'link';
    button.append(...[].concat(content));
    button.title = title;
    Object.assign(button.dataset, data);
    return button;
  }

  const filterButton = (filter, value, text) => linkButton(text, filterTitle[filter], { filter, value });

  function bodyCell(tr, column, row) {
    if (column.kind === 'text') {
      const value = row[column.key];
      const text = column.format ? column.format(value) : String(value);
      const td = cell(tr, column.filter || column.render ? '' : text, column.key, false);
      if (column.filter) td.appendChild(filterButton(column.filter, value, text));
      if (column.render) column.render(td, row);
      return td;
    }
    if (column.kind === 'count') return cell(tr, integer(row[column.key]), column.key, true);
    if (column.kind === 'measure') return cell(tr, column.format(row[column.key]), column.key, true);
    return cell(tr, column.format(column.value ? column.value(row) : fraction(column.of(row))), column.key, true);
  }

  /**
   * The totals row: every count summed, every ratio worked out from the sums, "Total" in the
   * first column, nothing in the other text columns, and – for a measure: a percentile of
   * the whole is not a sum of the rows' percentiles, nor their average.
   */
  function totalsRow(rows, columns) {
    const sums = {};
    for (const field of Object.keys(rows[0])) {
      if (typeof rows[0][field] === 'number') sums[field] = total(rows, field);
    }
    const tr = document.createElement('tr');
    tr.className = 'total';
    columns.forEach((column, i) => {
      if (column.kind === 'text') cell(tr, i === 0 ? 'Total' : '', column.key, false);
      else if (column.kind === 'count') cell(tr, integer(sums[column.key]), column.key, true);
      else if (column.kind === 'measure') cell(tr, '–', column.key, true).title = 'Percentiles of several rows cannot be added up';
      else cell(tr, column.format(fraction(column.of(sums))), column.key, true);
      labelCell(tr.lastChild, column);
    });
    return tr;
  }

  /**
   * Fills a table: its heading row (unless the page has its own), one row per item and the
   * totals row. The table scrolls in its box on a narrow screen, its first column kept in view.
   */
  function fillTable(table, rows, columns) {
    const element = $(table.id);
    if (!table.ownHeading) {
      const tr = document.createElement('tr');
      tr.replaceChildren(...columns.map((column) => {
        const th = document.createElement('th');
        th.textContent = column.label;
        th.dataset.col = column.key;
        if (column.kind !== 'text') th.className = 'num';
        if (column.className) th.classList.add(column.className);
        return th;
      }));
      element.tHead.replaceChildren(tr);
    }
    element.tBodies[0].replaceChildren(...rows.map((row) => {
      const tr = document.createElement('tr');
      for (const column of columns) {
        const td = bodyCell(tr, column, row);
        labelCell(td, column);
      }
      if (table.decorate) table.decorate(tr, row);
      return tr;
    }));
    if (rows.length === 0) {
      const tr = document.createElement('tr');
      const td = cell(tr, table.empty || 'No rows for these filters.', null, false);
      td.colSpan = columns.length;
      td.className = 'empty';
      element.tBodies[0].appendChild(tr);
    }
    const foot = element.tFoot || element.createTFoot();
    foot.replaceChildren(...(rows.length && table.totals !== false ? [totalsRow(rows, columns)] : []));
  }

  /**
   * A cell's classes from its column, and its column's heading in data-label: on a phone the
   * style sheet shows each row as a card, every value under its heading, so that no column
   * is out of view.
   */
  function labelCell(td, column) {
    td.dataset.label = column.label;
    if (column.wrap) td.classList.add('wrap');
    if (column.wide) td.classList.add('wide');
    if (column.className) td.classList.add(column.className);
  }

  function showLag(results) {
    const lag = $('lag');
    const lagEvents = Math.max(...results.map((r) => r.lagEvents));
    const lagSeconds = Math.max(...results.map((r) => r.lagSeconds));
    lag.hidden = false;
    lag.textContent = 'Projection lag: ' + integer(lagEvents) + ' events, ' + lagSeconds.toFixed(1) + ' s';
    lag.dataset.events = String(lagEvents);
    lag.className = lagEvents > 0 ? 'lag behind' : 'lag';
  }

  /** The tiles' numbers of a range; a ratio without a denominator is null (no CTR, no share). */
  function totals(summaryRows, adchoicesRows) {
    const impressions = total(summaryRows, 'impressions');
    const clicks = total(summaryRows, 'clicks');
    const attributed = total(summaryRows, 'attributedClicks');
    const eea = total(adchoicesRows, 'eeaReservationImpressions');
    const givtImpressions = total(summaryRows, 'givtImpressions');
    const givtClicks = total(summaryRows, 'givtClicks');
    return {
      impressions, clicks, attributed,
      // Labelled events are never in impressions or clicks, so the whole is counted + labelled.
      givtImpressions, givtClicks,
      givtImpressionShare: fraction([givtImpressions, impressions + givtImpressions]),
      givtClickShare: fraction([givtClicks, clicks + givtClicks]),
      ctr: fraction([attributed, impressions]),
      duplicateImpressions: total(summaryRows, 'duplicateImpressions'),
      duplicateClicks: total(summaryRows, 'duplicateClicks'),
      stale: total(summaryRows, 'staleImpressions'),
      eea, withAdChoices: total(adchoicesRows, 'withAdChoices'),
      share: fraction([total(adchoicesRows, 'withAdChoices'), eea]),
    };
  }

  // [tile, total, kind, whether a rise is bad news (it is coloured so)]
  const tiles = [
    ['impressions', 'impressions', 'count', false], ['clicks', 'clicks', 'count', false],
    ['attributed', 'attributed', 'count', false], ['ctr', 'ctr', 'ratio', false],
    ['duplicate-impressions', 'duplicateImpressions', 'count', true], ['duplicate-clicks', 'duplicateClicks', 'count', true],
    ['stale', 'stale', 'count', true], ['adchoices-share', 'share', 'ratio', false],
    ['givt-impressions-share', 'givtImpressionShare', 'ratio', true], ['givt-clicks-share', 'givtClickShare', 'ratio', true],
  ];

  /**
   * Each tile's number in the previous period and the change: relative for counts ("+12 %"),
   * in percentage points for ratios ("+1.5 pp"); "new" when the previous count was 0. A ratio
   * that either period lacks (no impressions: –) has no change, only the previous value.
   */
  function showComparison(previous, current) {
    for (const [id, field, kind, riseIsBad] of tiles) {
      const change = $('change-' + id);
      change.hidden = !previous;
      change.className = 'change';
      if (!previous) { change.textContent = ''; continue; }
      const was = previous[field];
      const now = current[field];
      let text = null;
      let delta = 0;
      if (kind === 'count') {
        if (was === 0) text = now === 0 ? '±0 %' : 'new';
        else {
          delta = Math.round((now - was) / was * 100);
          text = (delta > 0 ? '+' : delta < 0 ? '-' : '±') + Math.abs(delta) + ' %';
        }
        change.textContent = 'previous ' + integer(was) + ', ' + text;
      } else if (was === null || now === null) {
        change.textContent = 'previous ' + ctrText(was);
      } else {
        delta = Math.round((now - was) * 1000) / 10;
        text = (delta > 0 ? '+' : delta < 0 ? '-' : '±') + Math.abs(delta).toFixed(1) + ' pp';
        change.textContent = 'previous ' + percent(was) + ', ' + text;
      }
      const rise = delta > 0 || text === 'new';
      if (rise || delta < 0) change.classList.add(rise !== riseIsBad ? 'better' : 'worse');
    }
  }

  /**
   * The tables of the reports view, drawn from the answers of one load (`data`, keyed as in
   * `reportRequests`): `rows(context)` in the order shown, `columns(context)`, `decorate(tr,
   * row)` for highlights and the tests' data attributes, `chart(rows, context)` for a chart of
   * the same rows. Each table gets a totals row.
   */
  const reportTables = [
    {
      id: 'ivt-table',
      // Per label in the order the rules decide them, then any other label by name.
      rows({ data }) {
        const perLabel = sumBy(data.ivt.rows, (r) => r.label, ['impressions', 'clicks', 'events']);
        const known = new Map(ivtLabels);
        const order = [...ivtLabels.map(([label]) => label), ...[...perLabel.keys()].filter((l) => !known.has(l)).sort()];
        return order.filter((label) => perLabel.has(label)).map((label) => {
          const g = perLabel.get(label);
          return { label, meaning: known.get(label) || '', impressions: g.impressions, clicks: g.clicks, events: g.events };
        });
      },
      // A share is of every impression (or click) event: counted + labelled.
      columns: ({ totals: t }) => [
        textColumn('label', 'Label'), countColumn('impressions', 'Impressions'),
        ratioColumn('impressionShare', 'Share of impressions', (r) => [r.impressions, t.impressions + t.givtImpressions]),
        countColumn('clicks', 'Clicks'), ratioColumn('clickShare', 'Share of clicks', (r) => [r.clicks, t.clicks + t.givtClicks]),
        countColumn('events', 'All events'), textColumn('meaning', 'Meaning', { wrap: true }),
      ],
      decorate: (tr, row) => { tr.dataset.label = row.label; },
    },
    {
      id: 'time-table',
      rows: ({ state, data }) => grouped(data.summary.rows, [timeKey(state)], ['impressions', 'clicks', 'attributedClicks']),
      columns: ({ state }) => [
        hourly(state) ? textColumn('hour', 'Hour', { render: hourCell }) : textColumn('day', 'Day', { filter: 'day' }),
        countColumn('impressions', 'Impressions'), countColumn('clicks', 'Clicks'), countColumn('attributedClicks', 'Attributed'),
        ratioColumn('ctr', 'CTR', (r) => [r.attributedClicks, r.impressions]),
      ],
      decorate: (tr, row) => { tr.dataset.time = row.hour || row.day; },
      chart: drawTimeChart,
    },
    {
      id: 'assets-table',
      rows: ({ data }) => grouped(data.assets.rows, ['assetKey'], assetFields)
        .sort((a, b) => b.clicks - a.clicks || (a.assetKey < b.assetKey ? -1 : 1)),
      columns: () => [
        textColumn('assetKey', 'Asset key'), countColumn('clicks', 'Clicks'), countColumn('attributedClicks', 'Attributed'),
        countColumn('noImpression', 'No impression'), countColumn('beforeImpression', 'Before impression'),
        countColumn('outsideWindow', 'Outside window'), countColumn('duplicateClicks', 'Duplicate clicks'),
      ],
      decorate: (tr, row) => { tr.dataset.assetKey = row.assetKey; },
      chart: drawAssetsChart,
    },
    {
      id: 'sources-table',
      rows: ({ data }) => grouped(data.sources.rows, ['adUnit', 'adapter'],
        ['appImpressions', 'sdkImpressions', 'mediationImpressions', 'doubleTrackedImpressionAds', 'doubleTrackedClickAds']),
      columns: () => [
        textColumn('adUnit', 'Ad unit', { filter: 'adUnit' }), textColumn('adapter', 'Adapter', { format: (a) => (a === '' ? '(none)' : a) }),
        countColumn('appImpressions', 'App'), countColumn('sdkImpressions', 'SDK'), countColumn('mediationImpressions', 'Mediation'),
        countColumn('doubleTrackedImpressionAds', 'Double-tracked impression ads'), countColumn('doubleTrackedClickAds', 'Double-tracked click ads'),
      ],
      decorate(tr, row) {
        tr.dataset.adapter = row.adapter;
        if (row.doubleTrackedImpressionAds > 0 || row.doubleTrackedClickAds > 0) tr.classList.add('flag');
      },
    },
    {
      id: 'duplicates-table',
      rows: ({ data }) => grouped(data.summary.rows, ['adUnit', 'formatId'],
        ['impressions', 'duplicateImpressions', 'staleImpressions', 'clicks', 'duplicateClicks']),
      columns: () => [
        textColumn('adUnit', 'Ad unit', { filter: 'adUnit' }), textColumn('formatId', 'Format', { filter: 'formatId' }),
        countColumn('impressions', 'Impressions'), countColumn('duplicateImpressions', 'Duplicate impressions'),
        countColumn('staleImpressions', 'Stale impressions'), countColumn('clicks', 'Clicks'), countColumn('duplicateClicks', 'Duplicate clicks'),
      ],
      decorate(tr, row) {
        if (row.duplicateImpressions > 0 || row.duplicateClicks > 0 || row.staleImpressions > 0) tr.classList.add('flag');
      },
    },
    {
      id: 'adchoices-table',
      rows: ({ data }) => data.adchoices.rows.map((r) => ({
        day: r.day, adUnit: r.adUnit, formatId: r.formatId, eeaReservationImpressions: r.eeaReservationImpressions,
        withAdChoices: r.withAdChoices, adchoicesClicks: r.adchoicesClicks,
      })),
      columns: () => [
        textColumn('day', 'Day'), textColumn('adUnit', 'Ad unit', { filter: 'adUnit', wide: true }), textColumn('formatId', 'Format', { filter: 'formatId' }),
        countColumn('eeaReservationImpressions', 'EEA reservation impressions'), countColumn('withAdChoices', 'With AdChoices'),
        ratioColumn('share', 'Share', (r) => [r.withAdChoices, r.eeaReservationImpressions]), countColumn('adchoicesClicks', 'AdChoices clicks'),
      ],
      decorate(tr, row) {
        if (row.withAdChoices < row.eeaReservationImpressions) {
          tr.classList.add('below');
          tr.title = 'Below 100 %: EEA reservation ads shown without the AdChoices icon';
        }
      },
    },
    {
      id: 'funnel-table',
      rows: ({ data }) => funnelRows(data),
      columns: () => [
        textColumn('day', 'Day', { filter: 'day' }), textColumn('adUnit', 'Ad unit', { filter: 'adUnit', wide: true }),
        countColumn('requests', 'Requests'), countColumn('adsRequested', 'Ads requested'), countColumn('filledRequests', 'Filled'),
        countColumn('failedRequests', 'Failed'), countColumn('unansweredRequests', 'Unanswered'),
        ratioColumn('fillRate', 'Fill rate', (r) => [r.filledRequests, r.requests]),
        countColumn('loadedAds', 'Loaded ads'), countColumn('shownAds', 'Shown'),
        ratioColumn('showRate', 'Show rate', (r) => [r.shownAds, r.loadedAds]), countColumn('clicks', 'Clicks'),
        latencyColumn('loadLatencyP50Ms', 'Load p50'), latencyColumn('loadLatencyP95Ms', 'Load p95'),
      ],
      decorate(tr, row) {
        tr.dataset.day = row.day;
        tr.dataset.adUnit = row.adUnit;
      },
      chart: drawFunnelChart,
    },
    {
      id: 'failures-table',
      // Per error code and ad unit, the most frequent first.
      rows: ({ data }) => grouped(data.failures.rows, ['errorCode', 'adUnit'], ['failedRequests'])
        .map((r) => Object.assign(r, { meaning: Object.hasOwn(errorMeanings, r.errorCode) ? errorMeanings[r.errorCode] : '' }))
        .sort((a, b) => b.failedRequests - a.failedRequests || byFields('errorCode', 'adUnit')(a, b)),
      columns: ({ data }) => {
        const failed = total(data.failures.rows, 'failedRequests');
        return [
          textColumn('errorCode', 'Error code'), textColumn('adUnit', 'Ad unit', { filter: 'adUnit', wide: true }),
          countColumn('failedRequests', 'Failed loads'), ratioColumn('share', 'Share of failed loads', (r) => [r.failedRequests, failed]),
          textColumn('meaning', 'Meaning', { wrap: true }),
        ];
      },
      decorate(tr, row) { tr.dataset.errorCode = row.errorCode; },
    },
    {
      id: 'waterfall-table',
      // A waterfall reads from its first network down: by day, ad unit, position, then network.
      rows: ({ data }) => data.waterfall.rows.map((r) => ({
        day: r.day, adUnit: r.adUnit, adapter: r.adapter, position: r.position, attempts: r.attempts, loaded: r.loaded,
        failed: r.failed, timeouts: r.timeouts, latencyP50Ms: r.latencyP50Ms, latencyP95Ms: r.latencyP95Ms,
      })).sort(byFields('day', 'adUnit', 'position', 'adapter')),
      columns: () => [
        textColumn('day', 'Day', { filter: 'day' }), textColumn('adUnit', 'Ad unit', { filter: 'adUnit', wide: true }),
        textColumn('position', 'Position'), textColumn('adapter', 'Network', { wide: true }),
        countColumn('attempts', 'Attempts'), countColumn('loaded', 'Loaded'), countColumn('failed', 'Failed'),
        countColumn('timeouts', 'Timeouts'), ratioColumn('fillRate', 'Fill rate', (r) => [r.loaded, r.attempts]),
        latencyColumn('latencyP50Ms', 'Latency p50'), latencyColumn('latencyP95Ms', 'Latency p95'),
      ],
      decorate(tr, row) {
        tr.dataset.adapter = row.adapter;
        tr.dataset.position = String(row.position);
      },
    },
  ];

  /**
   * The funnel table's rows: the funnel report's (day, ad unit) rows, each with the summary's
   * clicks of the same day and ad unit. Clicks of a day and ad unit without funnel events (an
   * app that sends none) stay out, as their requests and loads are not known.
   */
  function funnelRows(data) {
    const key = (r) => r.day + '\u0000' + r.adUnit;
    const clicks = sumBy(data.summary.rows, key, ['clicks']);
    return data.funnel.rows.map((r) => ({
      day: r.day, adUnit: r.adUnit, requests: r.requests, adsRequested: r.adsRequested, filledRequests: r.filledRequests,
      failedRequests: r.failedRequests, unansweredRequests: r.unansweredRequests, loadedAds: r.loadedAds, shownAds: r.shownAds,
      clicks: clicks.has(key(r)) ? clicks.get(key(r)).clicks : 0, loadLatencyP50Ms: r.loadLatencyP50Ms, loadLatencyP95Ms: r.loadLatencyP95Ms,
    })).sort(byFields('day', 'adUnit'));
  }

  /** An hour as the API labels it, free to break after its day on a narrow screen. */
  function hourCell(td, row) {
    td.append(row.hour.slice(0, 11), document.createElement('wbr'), row.hour.slice(11));
  }

  const assetFields = ['clicks', 'attributedClicks', 'noImpression', 'beforeImpression', 'outsideWindow', 'duplicateClicks'];
  const timeKey = (state) => (hourly(state) ? 'hour' : 'day');

  function renderReports(state, data, ready) {
    for (const row of data.summary.rows) { seen.adUnits.add(row.adUnit); seen.formatIds.add(row.formatId); }
    for (const row of data.funnel.rows) seen.adUnits.add(row.adUnit);
    for (const [id, values] of [['ad-units', seen.adUnits], ['format-ids', seen.formatIds]]) {
      $(id).replaceChildren(...[...values].sort().map((value) => {
        const option = document.createElement('option');
        option.value = value;
        return option;
      }));
    }
    const t = totals(data.summary.rows, data.adchoices.rows);
    $('total-impressions').textContent = integer(t.impressions);
    $('total-clicks').textContent = integer(t.clicks);
    $('total-attributed').textContent = integer(t.attributed);
    $('total-ctr').textContent = ctrText(t.ctr);
    $('total-duplicate-impressions').textContent = integer(t.duplicateImpressions);
    $('total-duplicate-clicks').textContent = integer(t.duplicateClicks);
    $('total-stale').textContent = integer(t.stale);
    const share = $('total-adchoices-share');
    share.textContent = t.eea ? percent(t.share) : 'no EEA reservation impressions';
    share.className = t.eea > 0 && t.withAdChoices < t.eea ? 'below' : '';
    showComparison(state.compare ? totals(data.previousSummary.rows, data.previousAdchoices.rows) : null, t);
    renderInvalidTraffic(data.summary, t, ready);

    const byHour = hourly(state);
    $('time-heading').textContent = 'Impressions, clicks and CTR per ' + (byHour ? 'hour' : 'day') + ' (' + data.summary.tz + ')';
    const context = { state, data, totals: t };
    for (const table of reportTables) {
      const rows = table.rows(context);
      fillTable(table, rows, table.columns(context));
      if (table.chart) table.chart(rows, context);
    }
    // Nothing labelled: a sentence, not a wide table around "no rows".
    const labelled = $('ivt-table').tBodies[0].querySelector('td.empty') === null;
    $('ivt-labels').hidden = !labelled;
    $('ivt-none').hidden = labelled;
  }

  /**
   * GIVT beside the net numbers: the share of impression and click events labelled invalid
   * (the labels are the ivt table's), and the rule set the numbers were computed with;
   * /readyz says when a newer one waits.
   */
  function renderInvalidTraffic(summary, t, ready) {
    const shares = [
      ['impressions', t.givtImpressionShare, t.givtImpressions, t.impressions],
      ['clicks', t.givtClickShare, t.givtClicks, t.clicks],
    ];
    for (const [what, share, labelled, counted] of shares) {
      $('givt-' + what + '-share').textContent = ctrText(share);
      $('givt-' + what + '-detail').textContent = integer(labelled) + ' labelled, ' + integer(counted) + ' counted';
    }

    const rules = summary.ivtRules;
    $('ivt-rules').textContent = rules === undefined ? '–' : String(rules);
    const detail = $('ivt-rules-detail');
    const waiting = $('ivt-waiting');
    const waits = ready && rules !== undefined && ready.newest > rules;
    detail.className = waits ? 'detail warn' : 'detail';
    if (waits) detail.textContent = 'rule set ' + ready.newest + ' waits for tracker rebuild';
    else if (rules === 0) detail.textContent = 'the empty rule set: nothing is labelled';
    else detail.textContent = ready && ready.newest === rules ? 'the newest' : 'tracker ivt show prints it';
    waiting.hidden = !waits;
    waiting.textContent = waits
      ? 'Invalid-traffic rule set ' + ready.newest + ' was activated but waits: these numbers use rule set ' + rules +
        " until 'tracker rebuild' applies rule set " + ready.newest + ' to the whole log.'
      : '';
  }

  // The narrowest a period of the time chart is drawn (its two bars, CSS px): a longer range
  // makes the chart wider than its box, which then scrolls, rather than bars of a pixel.
  const minPeriodWidth = 14;
  // The room of the chart's two value axes beside its periods.
  const axesWidth = 110;

  /**
   * A tick of the time chart, or null for none: a date every few days, so that labels never
   * overlap and never need turning; an hour as its clock time every few hours, with the date
   * below the first of each day. The tooltip has the API's whole label (the two 01:00 hours
   * of a fall-back night differ by their offset).
   */
  function timeTick(labels, index, byHour, periodWidth) {
    const label = labels[index];
    if (!byHour) {
      const every = [1, 2, 3, 7, 14, 28, 56, 91].find((n) => n * periodWidth >= 88) || 182;
      return index % every === 0 ? label : null;
    }
    const every = [1, 2, 3, 4, 6, 12].find((n) => n * periodWidth >= 64) || 24;
    const shown = (l) => Number(l.slice(11, 13)) % every === 0;
    if (!shown(label)) return null;
    const day = label.slice(0, 10);
    const clockTime = label.slice(11, 16);
    return labels.slice(0, index).some((l) => l.slice(0, 10) === day && shown(l)) ? clockTime : [clockTime, day];
  }

  /**
   * The chart over time: by hour for a short range, else by day, in the zone's local time as
   * the API labels it. The chart has every hour or day of the range (no impressions: 0); a
   * period without impressions has no CTR, so the line has a gap there rather than a 0 % the
   * table would not show.
   */
  function drawTimeChart(rows, { state, data }) {
    const byHour = hourly(state);
    const key = timeKey(state);
    const perTime = new Map(rows.map((row) => [row[key], row]));
    let labels = byHour ? hoursOf(state.from, state.to, data.summary.tz) : daysBetween(state.from, state.to);
    const missing = [...perTime.keys()].filter((k) => !labels.includes(k));
    if (missing.length) {
      // An hour this browser's zone data does not know: kept, in time order.
      labels = [...labels, ...missing].sort((a, b) => Date.parse(a) - Date.parse(b));
    }
    const values = (field) => labels.map((k) => (perTime.has(k) ? perTime.get(k)[field] : 0));
    const ctr = labels.map((k) => {
      const ratio = perTime.has(k) ? fraction([perTime.get(k).attributedClicks, perTime.get(k).impressions]) : null;
      return ratio === null ? null : Number((100 * ratio).toFixed(2));
    });
    $('time-chart').parentElement.style.minWidth = labels.length * minPeriodWidth + axesWidth + 'px';
    draw('time-chart', {
      type: 'bar',
      data: {
        labels,
        datasets: [
          { label: 'Impressions', data: values('impressions'), backgroundColor: colors.impressions, yAxisID: 'y' },
          { label: 'Clicks', data: values('clicks'), backgroundColor: colors.clicks, yAxisID: 'y' },
          { label: 'CTR %', data: ctr, type: 'line', spanGaps: false, borderColor: colors.ctr, backgroundColor: colors.ctr, yAxisID: 'ctr' },
        ],
      },
      options: {
        // The legend at the start, where a chart wider than its box is seen first.
        plugins: { legend: { align: 'start' } },
        scales: {
          x: {
            ticks: {
              autoSkip: false, maxRotation: 0, minRotation: 0,
              callback(value, index) { return timeTick(labels, index, byHour, this.width / labels.length); },
            },
          },
          y: { beginAtZero: true, ticks: { precision: 0 } },
          ctr: { beginAtZero: true, position: 'right', grid: { drawOnChartArea: false }, title: { display: true, text: 'CTR %' } },
        },
      },
    });
  }

  function drawAssetsChart(rows) {
    draw('assets-chart', {
      type: 'bar',
      data: {
        labels: rows.map((r) => r.assetKey),
        datasets: [
          ['Attributed', 'attributedClicks', colors.attributed],
          ['No impression', 'noImpression', colors.noImpression],
          ['Before impression', 'beforeImpression', colors.beforeImpression],
          ['Outside window', 'outsideWindow', colors.outsideWindow],
        ].map(([label, field, color]) => ({ label, data: rows.map((r) => r[field]), backgroundColor: color })),
      },
      options: {
        indexAxis: 'y',
        scales: { x: { stacked: true, beginAtZero: true, ticks: { precision: 0, maxRotation: 0 } }, y: { stacked: true } },
      },
    });
  }

  // The funnel's stages, in the order an ad goes through them: loads, then ads, then clicks.
  const funnelStages = [
    ['Requests', 'requests', colors.requests], ['Filled', 'filledRequests', colors.filled],
    ['Loaded ads', 'loadedAds', colors.impressions], ['Shown', 'shownAds', colors.shown], ['Clicks', 'clicks', colors.clicks],
  ];

  /** The funnel's totals over the rows of its table, a bar per stage. */
  function drawFunnelChart(rows) {
    draw('funnel-chart', {
      type: 'bar',
      data: {
        labels: funnelStages.map(([label]) => label),
        datasets: [{
          label: 'Total', data: funnelStages.map(([, field]) => total(rows, field)),
          backgroundColor: funnelStages.map(([, , color]) => color),
        }],
      },
      options: {
        indexAxis: 'y',
        plugins: { legend: { display: false } },
        scales: { x: { beginAtZero: true, ticks: { precision: 0, maxRotation: 0 } } },
      },
    });
  }

  function draw(id, config) {
    if (typeof window.Chart !== 'function') return; // the page says why (see the notice)
    if (charts[id]) charts[id].destroy();
    $(id).closest('.chart-box').hidden = false;
    config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options);
    charts[id] = new window.Chart($(id), config);
  }

  // ---- CSV downloads ----------------------------------------------------------------------

  /** Hands the browser a file (the key stays in the header of the request that fetched it). */
  function saveFile(blob, name) {
    const link = document.createElement('a');
    link.href = URL.createObjectURL(blob);
    link.download = name;
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60000);
  }

  /** The API's CSV of a report for the filters shown (as the page asked it), offered as a file. */
  async function downloadCSV(name) {
    const key = sessionStorage.getItem(storageKey);
    const state = shownState;
    if (!key || !state) return;
    const params = requestParams(reportRequests.find((request) => request.key === name), state);
    params.set('format', 'csv');
    const status = $('status');
    try {
      const response = await fetchAPI('/v1/reports/' + name + '?' + params, key, 'text/csv');
      if (!response.ok) throw await errorOf(response);
      saveFile(await response.blob(), ['tracker', name, state.from, state.to, state.tz.replace(/[^A-Za-z0-9_+-]+/g, '_')].join('-') +
        (params.get('granularity') === 'hour' ? '-hourly' : '') + '.csv');
    } catch (error) {
      if (error instanceof KeyRefused) { keyRefused(error); return; }
      status.className = 'error';
      status.textContent = errorText(error);
    }
  }

  // ---- Reconciliation with Ad Manager -----------------------------------------------------

  /** An import as one line of the chooser: its days, zone, matched rows and when it came. */
  function importText(imported) {
    const days = imported.from ? (imported.from === imported.to ? imported.from : imported.from + ' to ' + imported.to) : 'no days';
    return days + ' · ' + imported.tz + ' · ' + imported.matched + ' of ' + imported.rows + ' rows matched · ' +
      imported.importedAt.slice(0, 16).replace('T', ' ') + ' UTC';
  }

  function fillImports(imports, chosen) {
    const select = $('rec-import');
    const options = imports.map((imported) => {
      const option = document.createElement('option');
      option.value = imported.id;
      option.textContent = importText(imported);
      option.selected = imported.id === chosen;
      return option;
    });
    if (imports.length && !imports.some((i) => i.id === chosen)) {
      const none = document.createElement('option');
      none.value = '';
      none.textContent = 'Choose an import';
      none.disabled = true;
      none.selected = true;
      options.unshift(none);
    }
    select.replaceChildren(...options);
    select.disabled = imports.length === 0;
  }

  /** The page has no import to show: how to make one, with this server's address and zone. */
  function showNoImport(state) {
    const zone = state.tz || startingZone();
    $('rec-curl').textContent = 'curl -X POST "' + location.origin + '/v1/reconciliations?tz=' + encodeURIComponent(zone).replace(/%2F/g, '/') + '" \\\n' +
      '  -H "Authorization: Bearer $TRACKER_REPORT_KEY" -H \'Content-Type: text/csv\' \\\n' +
      '  --data-binary @admanager.csv';
    $('rec-cli').textContent = 'tracker reconcile import admanager.csv --tz ' + zone + ' [--unit-map units.csv]';
    $('rec-empty').hidden = false;
    $('rec-details').hidden = true;
  }

  async function loadReconciliation(state, key) {
    const mine = ++recGeneration;
    recShown = hashOf(state);
    const view = $('rec-view');
    const status = $('rec-status');
    view.dataset.state = 'loading';
    status.className = '';
    status.textContent = 'Loading…';
    $('rec-threshold').value = state.threshold;
    $('rec-threshold').setCustomValidity('');
    $('rec-include-test').checked = state.includeTest;
    try {
      const listed = await fetchAPI('/v1/reconciliations', key);
      if (!listed.ok) throw await errorOf(listed);
      const imports = (await listed.json()).imports;
      if (mine !== recGeneration) return;
      // Without a choice in the URL, the newest import (the list is newest first).
      const chosen = state.import ? imports.find((i) => i.id === state.import) : imports[0];
      fillImports(imports, chosen ? chosen.id : '');
      // Nothing to choose or tune before a first import: the form would only be in the way.
      $('rec-form').hidden = imports.length === 0;
      if (imports.length === 0) {
        showNoImport(state);
        status.textContent = 'Nothing has been imported from Ad Manager yet.';
        view.dataset.state = 'empty';
        return;
      }
      $('rec-empty').hidden = true;
      if (!chosen) {
        $('rec-details').hidden = true;
        status.className = 'error';
        status.textContent = 'No import has the id ' + state.import + ': choose one of the list.';
        view.dataset.state = 'missing';
        return;
      }
      if (!state.import) {
        // The URL names the import shown, so a shared link keeps showing it after newer imports.
        state.import = chosen.id;
        recShown = hashOf(state);
        writeHash(state, true);
      }
      const params = new URLSearchParams();
      params.set('import', chosen.id);
      params.set('threshold', thresholdFraction(state.threshold));
      params.set('includeTest', state.includeTest ? 'true' : 'false');
      const response = await fetchAPI('/v1/reports/reconciliation?' + params, key);
      if (!response.ok) throw await errorOf(response);
      const report = await response.json();
      if (mine !== recGeneration) return;
      renderReconciliation(chosen, report, state);
      showLag([lagOf(response)]);
      recShownQuery = { params, from: report.from, to: report.to, tz: report.tz };
      const outside = report.rows.filter((r) => !r.withinTolerance).length;
      status.textContent = report.rows.length + (report.rows.length === 1 ? ' row' : ' rows') + ', ' + outside +
        ' outside ±' + percent(report.threshold) + ', local days in ' + report.tz +
        (state.includeTest ? ', test traffic included.' : '.');
      view.dataset.state = 'ready';
    } catch (error) {
      if (mine !== recGeneration) return;
      recShown = null;
      if (error instanceof KeyRefused) { keyRefused(error); return; }
      $('rec-details').hidden = true;
      status.className = 'error';
      status.textContent = errorText(error);
      view.dataset.state = 'error';
    }
  }

  // The reconciliation table: its heading (grouped by measure) is the page's; the columns'
  // labels name the measure too, for a phone's cards.
  const reconciliationTable = {
    id: 'rec-table', ownHeading: true, empty: 'Neither side has impressions or clicks on these days.',
    decorate(tr, row) {
      tr.dataset.day = row.day;
      tr.dataset.adUnit = row.adUnit;
      tr.dataset.within = String(row.withinTolerance);
      if (!row.withinTolerance) tr.className = 'outside';
    },
  };

  /**
   * The reconciliation's columns: the day (opening it by hour), the ad unit, the verdict next
   * to it (where a phone shows it without scrolling), then for impressions and for clicks Ad
   * Manager's count, the tracker's, the discrepancy and what the tracker left out.
   */
  function reconciliationColumns(report) {
    const discrepancy = (key, label, tracker, adManager) => ratioColumn(key, label, (r) => [r[tracker] - r[adManager], r[adManager]],
      { format: signedPercent, value: (r) => r[key] });
    return [
      textColumn('day', 'Day', { render: (td, row) => td.appendChild(openButton(row.day, row.adUnit, report.tz, row.day)) }),
      textColumn('adUnit', 'Ad unit', { wide: true }),
      textColumn('withinTolerance', 'Tolerance', { render: verdict }),
      countColumn('adManagerImpressions', 'Ad Manager impressions', { className: 'first' }), countColumn('impressions', 'Tracker impressions'),
      discrepancy('impressionDiscrepancy', 'Impression discrepancy', 'impressions', 'adManagerImpressions'),
      countColumn('duplicateImpressions', 'Duplicate impressions'), countColumn('givtImpressions', 'GIVT impressions'),
      countColumn('staleImpressions', 'Stale impressions'),
      countColumn('adManagerClicks', 'Ad Manager clicks', { className: 'first' }), countColumn('clicks', 'Tracker clicks'),
      discrepancy('clickDiscrepancy', 'Click discrepancy', 'clicks', 'adManagerClicks'),
      countColumn('duplicateClicks', 'Duplicate clicks'), countColumn('givtClicks', 'GIVT clicks'),
    ];
  }

  /** A row's verdict: an icon and a word, not colour alone; outside, a way to its explanation. */
  function verdict(td, row) {
    if (row.withinTolerance) {
      td.append(icon('✓'), 'within');
      return;
    }
    td.appendChild(linkButton([icon('⚠'), 'outside'], 'What the tracker knows of this difference', { explain: String(row.index) }));
  }

  function renderReconciliation(imported, report, state) {
    const facts = [
      ['tz', 'Time zone of its days', imported.tz],
      ['days', 'Days', imported.from ? (imported.from === imported.to ? imported.from : imported.from + ' to ' + imported.to) : 'none'],
      ['matched', 'Rows matched to an ad unit', imported.matched + ' of ' + imported.rows],
      ['imported', 'Imported', imported.importedAt + ' by ' + imported.importedBy],
      ['ivtRules', 'GIVT counted under rule set', String(report.ivtRules)],
      ['id', 'Id', imported.id],
    ];
    showFacts('rec-facts', facts);
    const unmatched = imported.unmatched;
    $('rec-unmatched').hidden = unmatched.length === 0;
    $('rec-unmatched-text').textContent = unmatched.length + (unmatched.length === 1 ? ' row' : ' rows') +
      " of the file matched no ad unit path, or several, and are left out of the report. Map each name to its path with " +
      "'tracker reconcile import FILE --tz " + imported.tz + " --unit-map units.csv' (a new import):";
    $('rec-unmatched-list').replaceChildren(...unmatched.map((u) => {
      const li = document.createElement('li');
      li.dataset.row = String(u.row);
      li.dataset.adUnit = u.adUnit;
      li.dataset.reason = u.reason;
      li.textContent = 'row ' + u.row + ': ' + u.adUnit +
        (u.reason === 'ambiguous' ? ' (the name of several ad unit paths)' : ' (no ad unit path by this name)');
      return li;
    }));

    const sum = (field) => total(report.rows, field);
    const discrepancy = (tracker, adManager) => fraction([tracker - adManager, adManager]);
    const outside = report.rows.filter((r) => !r.withinTolerance).length;
    const totals = $('rec-totals');
    totals.replaceChildren();
    appendParts(totals, [
      'Over ' + (report.from === report.to ? report.from : report.from + ' to ' + report.to) + ': Ad Manager ',
      ['adManagerImpressions', integer(sum('adManagerImpressions'))], ' impressions, the tracker ',
      ['impressions', integer(sum('impressions'))], ' (', ['impressionDiscrepancy', signedPercent(discrepancy(sum('impressions'), sum('adManagerImpressions')))],
      '); clicks ', ['adManagerClicks', integer(sum('adManagerClicks'))], ' and ', ['clicks', integer(sum('clicks'))],
      ' (', ['clickDiscrepancy', signedPercent(discrepancy(sum('clicks'), sum('adManagerClicks')))], '). ',
      ['outside', String(outside)], ' of ', ['rows', String(report.rows.length)], ' rows outside ±' + percent(report.threshold) + '.',
    ]);

    // Each row knows its place, which names its explanation below the table.
    fillTable(reconciliationTable, report.rows.map((row, index) => Object.assign({ index }, row)), reconciliationColumns(report));

    const explained = report.rows.map((row, i) => [row, i]).filter(([row]) => !row.withinTolerance);
    $('rec-explain').replaceChildren(...explained.map(([row, i]) => explanation(row, i, report)));
    $('rec-explain-panel').hidden = explained.length === 0;
    $('rec-details').hidden = false;
  }

  function icon(symbol) {
    const span = document.createElement('span');
    span.className = 'icon';
    span.setAttribute('aria-hidden', 'true');
    span.textContent = symbol + ' ';
    return span;
  }

  /** Text and numbers into an element; each number in a span named by data-field, for the reader's eye and the tests. */
  // A <dl> of facts, each [name, label, value]: the name goes to data-fact for the tests.
  function showFacts(id, facts) {
    $(id).replaceChildren(...facts.flatMap(([name, label, value]) => {
      const dt = document.createElement('dt');
      dt.textContent = label;
      const dd = document.createElement('dd');
      dd.textContent = value;
      dd.dataset.fact = name;
      return [dt, dd];
    }));
  }

  function appendParts(element, parts) {
    for (const part of parts) {
      if (typeof part === 'string') { element.append(part); continue; }
      const span = document.createElement('span');
      span.dataset.field = part[0];
      span.className = 'figure';
      span.textContent = part[1];
      element.appendChild(span);
    }
  }

  /** A button that shows a day of an ad unit by hour in the reports, in the import's zone. */
  function openButton(day, adUnit, zone, text) {
    return linkButton(text, 'Show ' + day + ' of ' + adUnit + ' by hour in the reports (' + zone + ')',
      { openDay: day, openAdUnit: adUnit, openTz: zone });
  }

  /**
   * What the tracker knows of a row's difference, per measure: the gap (Ad Manager − the
   * tracker), the duplicates and GIVT the tracker received and left out (they can explain the
   * tracker being below, never above), and stale impressions, which it counted.
   */
  function explanation(row, index, report) {
    const article = document.createElement('article');
    article.className = 'explain';
    article.id = 'rec-explain-' + index;
    article.tabIndex = -1;
    article.dataset.day = row.day;
    article.dataset.adUnit = row.adUnit;
    const heading = document.createElement('h3');
    heading.append(icon('⚠'), row.day + ' · ' + row.adUnit + ': outside ±' + percent(report.threshold));
    article.appendChild(heading);
    const measures = [
      ['impressions', 'Impressions', row.impressions, row.adManagerImpressions, row.impressionDiscrepancy,
        row.duplicateImpressions, row.givtImpressions, row.staleImpressions],
      ['clicks', 'Clicks', row.clicks, row.adManagerClicks, row.clickDiscrepancy, row.duplicateClicks, row.givtClicks, null],
    ];
    for (const [measure, name, tracker, adManager, discrepancy, duplicates, givt, stale] of measures) {
      const p = document.createElement('p');
      p.dataset.measure = measure;
      const outside = discrepancy === null ? tracker !== 0 : Math.abs(discrepancy) > report.threshold + 1e-12;
      p.dataset.within = String(!outside);
      p.append(icon(outside ? '⚠' : '✓'));
      const noun = (n) => (n === 1 ? name.toLowerCase().replace(/s$/, '') : name.toLowerCase());
      const known = [['duplicates', integer(duplicates)], ', GIVT ', ['givt', integer(givt)]];
      if (stale !== null) known.push(', stale ', ['stale', integer(stale)]);
      const gap = adManager - tracker;
      const left = duplicates + givt;
      if (adManager === 0 && tracker === 0) {
        appendParts(p, [name + ': none on either side.']);
      } else if (adManager === 0) {
        appendParts(p, [name + ': Ad Manager has none for this day and ad unit, the tracker counted ', ['tracker', integer(tracker)],
          '; duplicates ', ...known, '. Check the import\'s days and its unmatched rows.']);
      } else if (gap > 0) {
        let share;
        if (left === 0) share = ['none of it'];
        else if (left >= gap) share = ['all of it' + (left > gap ? ', and ' + integer(left - gap) + ' more' : '')];
        else share = [['explainedShare', Math.round(100 * left / gap) + ' %'], ' of it; ', ['unexplained', integer(gap - left)], ' remain'];
        appendParts(p, [name + ': the gap is ', ['gap', integer(gap)], ' ' + noun(gap) + ' (Ad Manager ', ['adManager', integer(adManager)],
          ', the tracker ', ['tracker', integer(tracker)], ', ', ['discrepancy', signedPercent(discrepancy)], '); duplicates ', ...known,
          '. Duplicates and GIVT, which the tracker left out, come to ', ['explained', integer(left)], ': ', ...share, '.']);
      } else if (gap < 0) {
        appendParts(p, [name + ': the tracker counted ', ['surplus', integer(-gap)], ' more than Ad Manager (the tracker ',
          ['tracker', integer(tracker)], ', Ad Manager ', ['adManager', integer(adManager)], ', ', ['discrepancy', signedPercent(discrepancy)],
          '); duplicates ', ...known, '. Duplicates and GIVT are already left out of its count, so they do not explain a surplus: ' +
          'look at test traffic and the import\'s time zone.']);
      } else {
        appendParts(p, [name + ': the same on both sides, ', ['tracker', integer(tracker)], '; duplicates ', ...known, '.']);
      }
      article.appendChild(p);
    }
    const open = openButton(row.day, row.adUnit, report.tz, 'Show ' + row.day + ' of this ad unit by hour (' + report.tz + ')');
    open.className = 'secondary';
    article.appendChild(open);
    return article;
  }

  /** Shows the reconciliation with the choices of its form, as a new history entry. */
  function applyReconciliation() {
    const threshold = $('rec-threshold');
    const text = threshold.value.trim();
    threshold.setCustomValidity(validThreshold(text) ? '' : 'A tolerance in % from 0 to 10000, e.g. 10 or 12.5.');
    if (!$('rec-form').reportValidity()) return;
    const state = readHash();
    state.view = 'reconciliation';
    state.ad = '';
    state.import = $('rec-import').value;
    state.threshold = text;
    state.includeTest = $('rec-include-test').checked;
    writeHash(state, false);
    recShown = null;
    route();
  }

  async function downloadReconciliationCSV() {
    const key = sessionStorage.getItem(storageKey);
    const query = recShownQuery;
    if (!key || !query) return;
    const params = new URLSearchParams(query.params);
    params.set('format', 'csv');
    const status = $('rec-status');
    try {
      const response = await fetchAPI('/v1/reports/reconciliation?' + params, key, 'text/csv');
      if (!response.ok) throw await errorOf(response);
      saveFile(await response.blob(), ['tracker', 'reconciliation', query.from, query.to,
        query.tz.replace(/[^A-Za-z0-9_+-]+/g, '_')].join('-') + '.csv');
    } catch (error) {
      if (error instanceof KeyRefused) { keyRefused(error); return; }
      status.className = 'error';
      status.textContent = errorText(error);
    }
  }

  // ---- An ad's audit trail ----------------------------------------------------------------

  /** What an outcome means, in the command line's words; other events named by their number. */
  function outcomeText(outcome, number) {
    const ref = (id) => 'event ' + (number.get(id) || id);
    switch (outcome.kind) {
      case 'ad_loaded': return outcome.earliest ? 'ad loaded (earliest: staleness is measured from it)' : 'ad loaded';
      case 'counted_impression': return outcome.stale ? 'counted impression, stale (over 1 h after the load)' : 'counted impression';
      case 'duplicate_impression': return 'duplicate impression of ' + ref(outcome.duplicateOf);
      case 'counted_click':
        return outcome.attributedTo ? 'counted click, attributed to ' + ref(outcome.attributedTo)
          : 'counted click, unattributed: ' + String(outcome.unattributedReason).replace(/_/g, ' ');
      case 'duplicate_click': return 'duplicate click of ' + ref(outcome.duplicateOf);
      case 'counted_adchoices_impression': return 'counted AdChoices impression';
      case 'duplicate_adchoices_impression': return 'duplicate AdChoices impression of ' + ref(outcome.duplicateOf);
      case 'adchoices_click': return 'AdChoices click';
      case 'video': return outcome.countedAs ? 'video, counted in ' + outcome.countedAs : "video, not counted (the ad's earlier event counts)";
      case 'test_traffic': return 'test traffic, left out (include test traffic to judge it)';
      case 'invalid_traffic': return 'invalid traffic (' + String(outcome.label).replace(/_/g, ' ') + '), left out of every measure';
      case 'load_request':
        return 'load requested, ' + outcome.loadOutcome + (outcome.errorCode ? ': ' + String(outcome.errorCode).replace(/_/g, ' ') : '');
      case 'repeated_request': return 'repeated request of ' + ref(outcome.duplicateOf) + ', not a request again';
      case 'load_failure': return outcome.counted ? "load failure, counted (the load's error)" : 'load failure, not counted (the load was filled, failed earlier or never requested)';
      case 'load_fill': return 'ad loaded: fills the load';
      case 'mediation_attempt': return 'mediation attempt, counted';
      case 'repeated_attempt': return 'repeated mediation result of ' + ref(outcome.duplicateOf) + ', not counted again';
      default: return outcome.kind;
    }
  }

  /** The rule behind a label, as the audit trail names it (`labelledBy`). */
  function labellingRule(rule) {
    if (rule.pattern !== undefined) return 'pattern ' + rule.pattern + (rule.name ? ' (' + rule.name + ')' : '');
    if (rule.ipRange !== undefined) return 'IP range ' + rule.ipRange;
    if (rule.maxEventsPerClientMinute !== undefined) return 'more than ' + rule.maxEventsPerClientMinute + ' events a minute';
    if (rule.maxClicksPerAd !== undefined) return 'more than ' + rule.maxClicksPerAd + ' clicks per ad';
    return '';
  }

  async function loadAd(state, key) {
    const mine = ++adGeneration;
    adShown = hashOf(state);
    const view = $('ad-view');
    const status = $('ad-status');
    view.dataset.state = 'loading';
    $('ad-request-id').textContent = state.ad;
    $('ad-lookup').value = state.ad;
    $('ad-details').hidden = true;
    status.className = '';
    status.textContent = 'Loading…';
    try {
      const response = await fetchAPI('/v1/ads/' + encodeURIComponent(state.ad) + '?includeTest=' + state.includeTest, key);
      if (mine !== adGeneration) return;
      if (response.status === 404) {
        const body = await response.json().catch(() => null);
        status.textContent = 'No such ad: ' + (body && body.message ? body.message : 'no stored event has this request id') + '.';
        view.dataset.state = 'missing';
        return;
      }
      if (!response.ok) throw await errorOf(response);
      const ad = await response.json();
      if (mine !== adGeneration) return;
      renderAd(ad, state);
      status.textContent = ad.events.length + (ad.events.length === 1 ? ' event' : ' events') +
        (state.includeTest ? ', test traffic included.' : '.');
      view.dataset.state = 'ready';
    } catch (error) {
      if (mine !== adGeneration) return;
      adShown = null;
      if (error instanceof KeyRefused) { keyRefused(error); return; }
      status.className = 'error';
      status.textContent = errorText(error);
      view.dataset.state = 'error';
    }
  }

  // The trail's table: one row per event, no totals.
  const adEventsTable = {
    id: 'ad-events', totals: false, empty: 'No stored event.',
    decorate(tr, row) {
      const e = row.event;
      tr.dataset.id = e.id;
      tr.dataset.kind = e.outcome.kind;
      if (e.outcome.kind === 'test_traffic') tr.className = 'test';
      if (e.label) {
        tr.dataset.label = e.label;
        tr.className = 'invalid';
      }
      tr.cells[0].title = e.id;
    },
  };

  function adEventColumns(state) {
    return [
      countColumn('number', '#'), textColumn('time', 'Time', { render: (td, row) => recordedTimes(td, row.event, state.tz), wide: true }),
      textColumn('type', 'Event'), textColumn('assetKey', 'Asset key'), textColumn('source', 'Source'),
      textColumn('adUnit', 'Ad unit', { wide: true }), textColumn('formatId', 'Format'), textColumn('flags', 'Flags', { wide: true }),
      textColumn('outcome', 'What it became', { wrap: true }),
    ];
  }

  /** An event's corrected time in the zone; what the device and the server recorded opens under it, by a click or a tap. */
  function recordedTimes(td, e, zone) {
    const details = document.createElement('details');
    const summary = document.createElement('summary');
    summary.textContent = localTime(e.correctedAt, zone);
    const recorded = document.createElement('dl');
    for (const [name, value] of [['corrected', e.correctedAt], ['occurred', e.occurredAt || '– (dropped by retention)'],
      ['sent', e.sentAt || '–'], ['received', e.receivedAt || '–']]) {
      const dt = document.createElement('dt');
      dt.textContent = name;
      const dd = document.createElement('dd');
      dd.textContent = value;
      dd.dataset.recorded = name;
      recorded.append(dt, dd);
    }
    details.append(summary, recorded);
    td.appendChild(details);
  }

  function renderAd(ad, state) {
    const number = new Map(ad.events.map((e, i) => [e.id, i + 1]));
    $('ad-zone').textContent = state.tz;
    const facts = [
      ['countedImpression', 'Counted impression', ad.countedImpression ? 'event ' + number.get(ad.countedImpression) : 'none'],
      ['doubleTrackedImpressions', 'Impression tracked by more than one source', ad.doubleTrackedImpressions ? 'yes' : 'no'],
      ['doubleTrackedClicks', 'Clicks tracked by more than one source', ad.doubleTrackedClicks ? 'yes' : 'no'],
      ['attributionWindow', 'Attribution window', integer(ad.attributionWindowSeconds) + ' s'],
      ['includeTest', 'Test traffic', ad.includeTest ? 'judged with the rest' : 'left out'],
    ];
    // The loads its ad_loaded events name: their events follow the ad's, numbered on.
    const loads = ad.loads || [];
    if (loads.length > 0) {
      facts.push(['loads', 'Loads', loads.map((l) => l.loadId + ': ' + (l.outcome === null ? 'not requested'
        : l.outcome + (l.errorCode ? ' (' + l.errorCode.replace(/_/g, ' ') + ')' : ''))).join('; ')]);
    }
    const rows = ad.events.map((e) => ({ e, load: null }));
    for (const l of loads) for (const e of l.events) rows.push({ e, load: l.loadId });
    for (const [i, row] of rows.entries()) if (!number.has(row.e.id)) number.set(row.e.id, i + 1);
    showFacts('ad-facts', facts);
    fillTable(adEventsTable, rows.map(({ e, load }, i) => ({
      event: e, number: i + 1, type: load === null ? e.type : e.type + ' (load ' + load + ')', assetKey: e.assetKey === null ? '' : e.assetKey,
      source: e.source + (e.adapter ? ' (' + e.adapter + ')' : ''), adUnit: e.adUnit, formatId: e.formatId,
      flags: [e.eea && 'EEA', e.reservation && 'reservation', e.test && 'test'].filter(Boolean).join(', '),
      outcome: outcomeText(e.outcome, number) + (e.labelledBy ? ' by ' + labellingRule(e.labelledBy) : ''),
    })), adEventColumns(state));
    $('ad-details').hidden = false;
  }

  // ---- Wiring -----------------------------------------------------------------------------

  function zoneList() {
    let names = [];
    try {
      if (typeof Intl.supportedValuesOf === 'function') names = Intl.supportedValuesOf('timeZone');
    } catch (_) {
      names = [];
    }
    return ['UTC', ...[...new Set([browserZone(), ...names.map(currentZone)])].filter((n) => n !== 'UTC').sort()];
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('tz-names').replaceChildren(...zoneList().map((name) => {
      const option = document.createElement('option');
      option.value = name;
      return option;
    }));

    $('key-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const key = $('key').value.trim();
      $('key').value = '';
      if (!key) return;
      sessionStorage.setItem(storageKey, key);
      route();
    });
    $('filters').addEventListener('submit', (event) => {
      event.preventDefault();
      applyFields();
    });
    for (const id of ['from', 'to', 'tz']) $(id).addEventListener('input', () => $(id).setCustomValidity(''));
    for (const button of document.querySelectorAll('[data-preset]')) {
      button.addEventListener('click', () => {
        const range = presetRange(button.dataset.preset, currentZone($('tz').value.trim()) || startingZone());
        $('from').value = range.from;
        $('to').value = range.to;
        applyFields();
      });
    }
    // A value in a table filters by itself: an ad unit or a format, or a day shown by hour.
    $('dashboard').addEventListener('click', (event) => {
      const button = event.target.closest('button[data-filter]');
      if (!button) return;
      const value = button.dataset.value;
      if (button.dataset.filter === 'adUnit') $('ad-unit').value = value;
      if (button.dataset.filter === 'formatId') $('format-id').value = value;
      if (button.dataset.filter === 'day') { $('from').value = value; $('to').value = value; }
      applyFields();
    });
    for (const button of document.querySelectorAll('[data-csv]')) {
      button.addEventListener('click', () => downloadCSV(button.dataset.csv));
    }
    $('ad-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const id = $('ad-lookup').value.trim();
      if (!id) return;
      const state = readHash();
      state.ad = id;
      adShown = null;
      writeHash(state, false);
      route();
    });
    $('ad-back').addEventListener('click', () => {
      const state = readHash();
      state.ad = '';
      writeHash(state, false);
      route();
    });
    $('forget').addEventListener('click', () => {
      sessionStorage.removeItem(storageKey);
      reportsGeneration++;
      adGeneration++;
      recGeneration++;
      showKeyPanel();
    });
    // The tabs: each asks its view again when clicked, even when it is the one shown.
    for (const button of document.querySelectorAll('#views [data-view]')) {
      button.addEventListener('click', () => {
        const state = readHash();
        state.ad = '';
        if (button.dataset.view === 'reconciliation') {
          if (state.view !== 'reconciliation') { state.import = ''; state.threshold = defaultThreshold; }
          state.view = 'reconciliation';
          recShown = null;
        } else {
          state.view = '';
          reportsShown = null;
        }
        writeHash(state, false);
        route();
      });
    }
    $('rec-form').addEventListener('submit', (event) => {
      event.preventDefault();
      applyReconciliation();
    });
    $('rec-import').addEventListener('change', applyReconciliation);
    $('rec-include-test').addEventListener('change', applyReconciliation);
    $('rec-threshold').addEventListener('input', () => $('rec-threshold').setCustomValidity(''));
    $('rec-csv').addEventListener('click', downloadReconciliationCSV);
    $('rec-view').addEventListener('click', (event) => {
      const explain = event.target.closest('button[data-explain]');
      if (explain) {
        const article = $('rec-explain-' + explain.dataset.explain);
        article.scrollIntoView({ block: 'nearest' });
        article.focus({ preventScroll: true });
        return;
      }
      // A day of an ad unit by hour in the reports, in the import's zone: where a zone or a
      // late hour shows first.
      const open = event.target.closest('button[data-open-day]');
      if (!open) return;
      const state = readHash();
      Object.assign(state, {
        view: '', ad: '', import: '', threshold: defaultThreshold, from: open.dataset.openDay, to: open.dataset.openDay,
        tz: open.dataset.openTz, adUnit: open.dataset.openAdUnit, formatId: '',
      });
      writeHash(state, false);
      reportsShown = null;
      route();
    });
    // The first view waits for the deployment's zone: drawn in the browser's first, it would
    // show days nobody asked for, then change under the reader's eyes.
    loadSettings().then(() => {
      // Back, Forward, or a fragment edited by hand.
      window.addEventListener('popstate', route);
      window.addEventListener('hashchange', route);
      route();
    });
  });
})();
