// The tracker's dashboard: reads the JSON reports API and an ad's audit trail with a report
// key kept in the tab's sessionStorage (sent only in the Authorization header) and draws
// what they answer. The filters live in the URL's fragment (shareable, kept over a reload,
// never sent to the server); the key never does.
// Every value from the server is put into the page as text (textContent), never as HTML:
// ad units and asset keys come from apps and may hold anything.
'use strict';

(() => {
  const storageKey = 'tracker.reportKey';
  const reports = ['summary', 'assets', 'sources', 'adchoices'];
  const colors = {
    impressions: '#2f6fb0', clicks: '#e07b00', ctr: '#2a9d5c',
    attributed: '#2a9d5c', noImpression: '#c0392b', beforeImpression: '#8e44ad', outsideWindow: '#7f8c8d',
  };
  // A range of up to this many days is charted by hour; longer ones by day.
  const hourlyMaxDays = 7;
  // The reports API's longest range (docs/REPORTS.md, "Parameters").
  const maxDays = 366;
  // The names under which the reports API writes an hour's offset as "Z" (ReportQuery.utcNames).
  const utcNames = new Set(['UTC', 'Etc/UTC', 'Etc/UCT', 'UCT', 'Etc/Universal', 'Universal', 'Etc/Zulu', 'Zulu']);
  const dayPattern = /^(\d{4})-(\d{2})-(\d{2})$/;
  const timePattern = /^(\d{4}-\d{2}-\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
  const $ = (id) => document.getElementById(id);
  const charts = {};
  const seen = { adUnits: new Set(), formatIds: new Set() };
  let reportsGeneration = 0;
  let adGeneration = 0;
  // What the page shows (or is loading), as fragment text, so that going back from an ad
  // or a repeated hashchange does not ask the server again.
  let reportsShown = null;
  let adShown = null;
  // The filters of the reports on the page, for the CSV downloads.
  let shownState = null;

  /** A key the server refused (401/403): the user has to enter another. */
  class KeyRefused extends Error {}

  const integer = (n) => n.toLocaleString('en-US');
  const percent = (ratio) => (ratio * 100).toFixed(1) + ' %';
  const ctrText = (ratio) => (ratio === null ? '–' : percent(ratio));
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

  function browserZone() {
    try {
      return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
    } catch (_) {
      return 'UTC';
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
    return wall.day + 'T' + wall.hour + ':' + wall.minute + ':' + wall.second + (m[5] || '') + offsetText(wall.offsetMinutes, zone);
  }

  // ---- The filters and the URL ------------------------------------------------------------

  function defaults() {
    const tz = browserZone();
    const to = today(tz);
    return { from: addDays(to, -6), to, tz, adUnit: '', formatId: '', includeTest: false, compare: false, ad: '' };
  }

  /** The state the URL's fragment names; what it leaves out (or gets wrong) is the default. */
  function readHash() {
    const hash = new URLSearchParams(location.hash.replace(/^#/, ''));
    const state = defaults();
    if (hash.get('tz')) state.tz = hash.get('tz');
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
      from: $('from').value.trim(), to: $('to').value.trim(), tz: $('tz').value.trim(),
      adUnit: $('ad-unit').value.trim(), formatId: $('format-id').value.trim(),
      includeTest: $('include-test').checked, compare: $('compare').checked, ad: '',
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
    $('ad-form').hidden = true;
    $('forget').hidden = true;
    $('lag').hidden = true;
    document.body.dataset.state = 'locked';
    document.body.dataset.view = 'key';
    reportsShown = null;
    adShown = null;
    const error = $('key-error');
    error.hidden = !message;
    error.textContent = message || '';
    $('key').focus();
  }

  function showView(view) {
    $('key-panel').hidden = true;
    $('forget').hidden = false;
    $('ad-form').hidden = false;
    $('dashboard').hidden = view !== 'reports';
    $('ad-view').hidden = view !== 'ad';
    document.body.dataset.view = view;
    if (document.body.dataset.state === 'locked') document.body.dataset.state = 'idle';
  }

  /** Shows what the URL names: the reports for its filters, or one ad's audit trail. */
  function route() {
    const key = sessionStorage.getItem(storageKey);
    if (!key) { showKeyPanel(); return; }
    const state = readHash();
    showFields(state);
    writeHash(state, true); // the URL always names what is shown, defaults included
    if (state.ad) {
      showView('ad');
      const shown = hashOf(state);
      if (shown !== adShown) loadAd(state, key);
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

  async function errorOf(what, response) {
    const body = await response.json().catch(() => null);
    return new Error(what + ': ' + (body && body.message ? body.error + ': ' + body.message : 'HTTP ' + response.status));
  }

  async function fetchReport(name, params, key) {
    const response = await fetchAPI('/v1/reports/' + name + '?' + params, key);
    if (!response.ok) throw await errorOf(name + ' report', response);
    const body = await response.json();
    return {
      rows: body.rows,
      tz: body.tz || 'UTC',
      lagEvents: Number(response.headers.get('X-Projection-Lag-Events') || 0),
      lagSeconds: Number(response.headers.get('X-Projection-Lag-Seconds') || 0),
    };
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

  async function loadReports(state, key) {
    const mine = ++reportsGeneration;
    reportsShown = hashOf(state);
    document.body.dataset.state = 'loading';
    const status = $('status');
    status.className = '';
    status.textContent = 'Loading…';
    const params = reportParams(state);
    const summaryParams = reportParams(state);
    if (hourly(state)) summaryParams.set('granularity', 'hour');
    const previous = previousRange(state);
    const previousParams = reportParams(state, previous);
    try {
      const asked = [
        fetchReport('summary', summaryParams, key),
        ...reports.slice(1).map((name) => fetchReport(name, params, key)),
      ];
      if (state.compare) asked.push(fetchReport('summary', previousParams, key), fetchReport('adchoices', previousParams, key));
      const results = await Promise.all(asked);
      if (mine !== reportsGeneration) return;
      const [summary, assets, sources, adchoices, previousSummary, previousAdchoices] = results;
      render(state, summary, assets, sources, adchoices);
      showLag(results);
      showComparison(state.compare ? totals(previousSummary.rows, previousAdchoices.rows) : null,
        totals(summary.rows, adchoices.rows));
      const filters = [];
      if (state.adUnit) filters.push('ad unit ' + state.adUnit);
      if (state.formatId) filters.push('format ' + state.formatId);
      if (state.includeTest) filters.push('test traffic included');
      status.textContent = 'From ' + state.from + ' to ' + state.to + ' (local days in ' + summary.tz +
        (hourly(state) ? ', by hour' : ', by day') + ')' + (filters.length ? ', ' + filters.join(', ') : '') + '.' +
        (state.compare ? ' Compared with ' + previous.from + ' to ' + previous.to + '.' : '');
      shownState = state;
      document.body.dataset.state = 'ready';
    } catch (error) {
      if (mine !== reportsGeneration) return;
      reportsShown = null;
      if (error instanceof KeyRefused) { keyRefused(error); return; }
      status.className = 'error';
      status.textContent = error.message;
      document.body.dataset.state = 'error';
    }
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

  function total(rows, field) {
    return rows.reduce((sum, row) => sum + row[field], 0);
  }

  function cell(row, text, column, numeric) {
    const td = document.createElement('td');
    td.textContent = text;
    if (column) td.dataset.col = column;
    if (numeric) td.className = 'num';
    row.appendChild(td);
    return td;
  }

  /**
   * Fills a table's body: one row per item, one cell per [column, format, filter]. A cell
   * with a filter holds a button that shows only that value (ad unit, format or day).
   */
  function fillTable(id, rows, columns, decorate) {
    const body = $(id).tBodies[0];
    body.replaceChildren();
    for (const row of rows) {
      const tr = document.createElement('tr');
      for (const [column, format, filter] of columns) {
        const value = row[column];
        const text = format ? format(value) : String(value);
        const td = cell(tr, filter ? '' : text, column, typeof value === 'number' || value === null);
        if (filter) {
          const button = document.createElement('button');
          button.type = 'button';
          button.className = 'link';
          button.textContent = text;
          button.dataset.filter = filter;
          button.dataset.value = value;
          button.title = filter === 'day' ? 'Show ' + value + ' by hour' : 'Show only ' + (filter === 'adUnit' ? 'ad unit ' : 'format ') + value;
          td.appendChild(button);
        }
      }
      if (decorate) decorate(tr, row);
      body.appendChild(tr);
    }
    if (rows.length === 0) {
      const tr = document.createElement('tr');
      const td = cell(tr, 'No rows for these filters.', null, false);
      td.colSpan = columns.length;
      td.className = 'empty';
      body.appendChild(tr);
    }
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
    const attributed = total(summaryRows, 'attributedClicks');
    const eea = total(adchoicesRows, 'eeaReservationImpressions');
    return {
      impressions, clicks: total(summaryRows, 'clicks'), attributed,
      ctr: impressions ? attributed / impressions : null,
      duplicateImpressions: total(summaryRows, 'duplicateImpressions'),
      duplicateClicks: total(summaryRows, 'duplicateClicks'),
      stale: total(summaryRows, 'staleImpressions'),
      eea, withAdChoices: total(adchoicesRows, 'withAdChoices'),
      share: eea ? total(adchoicesRows, 'withAdChoices') / eea : null,
    };
  }

  // [tile, total, kind, whether a rise is bad news (it is coloured so)]
  const tiles = [
    ['impressions', 'impressions', 'count', false], ['clicks', 'clicks', 'count', false],
    ['attributed', 'attributed', 'count', false], ['ctr', 'ctr', 'ratio', false],
    ['duplicate-impressions', 'duplicateImpressions', 'count', true], ['duplicate-clicks', 'duplicateClicks', 'count', true],
    ['stale', 'stale', 'count', true], ['adchoices-share', 'share', 'ratio', false],
  ];

  /**
   * Each tile's number in the previous period and the change: relative for counts ("+12 %"),
   * in percentage points for ratios ("+1.5 pp"); "new" when the previous count was 0.
   */
  function showComparison(previous, current) {
    for (const [id, field, kind, riseIsBad] of tiles) {
      const change = $('change-' + id);
      change.hidden = !previous;
      change.className = 'change';
      if (!previous) { change.textContent = ''; continue; }
      const was = previous[field];
      const now = current[field];
      let text;
      let delta = 0;
      if (kind === 'count') {
        if (was === 0) text = now === 0 ? '±0 %' : 'new';
        else {
          delta = Math.round((now - was) / was * 100);
          text = (delta > 0 ? '+' : delta < 0 ? '-' : '±') + Math.abs(delta) + ' %';
        }
        change.textContent = 'previous ' + integer(was) + ', ' + text;
      } else {
        if (was === null || now === null) text = '–';
        else {
          delta = Math.round((now - was) * 1000) / 10;
          text = (delta > 0 ? '+' : delta < 0 ? '-' : '±') + Math.abs(delta).toFixed(1) + ' pp';
        }
        change.textContent = 'previous ' + (was === null ? '–' : percent(was)) + ', ' + text;
      }
      const rise = delta > 0 || text === 'new';
      if (rise || delta < 0) change.classList.add(rise !== riseIsBad ? 'better' : 'worse');
    }
  }

  function render(state, summary, assets, sources, adchoices) {
    for (const row of summary.rows) { seen.adUnits.add(row.adUnit); seen.formatIds.add(row.formatId); }
    for (const [id, values] of [['ad-units', seen.adUnits], ['format-ids', seen.formatIds]]) {
      $(id).replaceChildren(...[...values].sort().map((value) => {
        const option = document.createElement('option');
        option.value = value;
        return option;
      }));
    }

    const s = summary.rows;
    const t = totals(s, adchoices.rows);
    $('total-impressions').textContent = integer(t.impressions);
    $('total-clicks').textContent = integer(t.clicks);
    $('total-attributed').textContent = integer(t.attributed);
    $('total-ctr').textContent = ctrText(t.ctr);
    $('total-duplicate-impressions').textContent = integer(t.duplicateImpressions);
    $('total-duplicate-clicks').textContent = integer(t.duplicateClicks);
    $('total-stale').textContent = integer(t.stale);
    const share = $('total-adchoices-share');
    share.textContent = t.eea ? percent(t.share) : 'no EEA reservation impressions';
    share.classList.toggle('below', t.eea > 0 && t.withAdChoices < t.eea);

    renderTime(state, summary);

    const assetFields = ['clicks', 'attributedClicks', 'noImpression', 'beforeImpression', 'outsideWindow', 'duplicateClicks'];
    const perAsset = [...sumBy(assets.rows, (r) => r.assetKey, assetFields).values()]
      .map((g) => Object.assign({ assetKey: g.key }, ...assetFields.map((f) => ({ [f]: g[f] }))))
      .sort((a, b) => b.clicks - a.clicks || (a.assetKey < b.assetKey ? -1 : 1));
    fillTable('assets-table', perAsset, [['assetKey'], ...assetFields.map((f) => [f, integer])],
      (tr, row) => { tr.dataset.assetKey = row.assetKey; });
    draw('assets-chart', {
      type: 'bar',
      data: {
        labels: perAsset.map((r) => r.assetKey),
        datasets: [
          ['Attributed', 'attributedClicks', colors.attributed],
          ['No impression', 'noImpression', colors.noImpression],
          ['Before impression', 'beforeImpression', colors.beforeImpression],
          ['Outside window', 'outsideWindow', colors.outsideWindow],
        ].map(([label, field, color]) => ({ label, data: perAsset.map((r) => r[field]), backgroundColor: color })),
      },
      options: { indexAxis: 'y', scales: { x: { stacked: true, beginAtZero: true, ticks: { precision: 0 } }, y: { stacked: true } } },
    });

    const sourceFields = ['appImpressions', 'sdkImpressions', 'mediationImpressions', 'doubleTrackedImpressionAds', 'doubleTrackedClickAds'];
    const perAdapter = [...sumBy(sources.rows, (r) => r.adUnit + '\u0000' + r.adapter, sourceFields).values()]
      .map((g) => Object.assign({ adUnit: g.first.adUnit, adapter: g.first.adapter }, ...sourceFields.map((f) => ({ [f]: g[f] }))));
    fillTable('sources-table', perAdapter,
      [['adUnit', null, 'adUnit'], ['adapter', (a) => (a === '' ? '(none)' : a)], ...sourceFields.map((f) => [f, integer])],
      (tr, row) => {
        tr.dataset.adapter = row.adapter;
        if (row.doubleTrackedImpressionAds > 0 || row.doubleTrackedClickAds > 0) tr.classList.add('flag');
      });

    const duplicateFields = ['impressions', 'duplicateImpressions', 'staleImpressions', 'clicks', 'duplicateClicks'];
    const perUnit = [...sumBy(s, (r) => r.adUnit + '\u0000' + r.formatId, duplicateFields).values()]
      .map((g) => Object.assign({ adUnit: g.first.adUnit, formatId: g.first.formatId }, ...duplicateFields.map((f) => ({ [f]: g[f] }))));
    fillTable('duplicates-table', perUnit,
      [['adUnit', null, 'adUnit'], ['formatId', null, 'formatId'], ...duplicateFields.map((f) => [f, integer])],
      (tr, row) => {
        if (row.duplicateImpressions > 0 || row.duplicateClicks > 0 || row.staleImpressions > 0) tr.classList.add('flag');
      });

    fillTable('adchoices-table', adchoices.rows, [['day'], ['adUnit', null, 'adUnit'], ['formatId', null, 'formatId'],
      ['eeaReservationImpressions', integer], ['withAdChoices', integer],
      ['share', (v) => percent(v)], ['adchoicesClicks', integer]],
      (tr, row) => {
        if (row.eeaReservationImpressions > 0 && row.share < 1) {
          tr.classList.add('below');
          tr.title = 'Below 100 %: EEA reservation ads shown without the AdChoices icon';
        }
      });
  }

  /**
   * The chart and table over time: by hour for a short range, else by day, in the zone's
   * local time as the API labels it. The chart has every hour or day of the range (no
   * impressions: 0); a period without impressions has no CTR, so the line has a gap there
   * rather than a 0 % the table would not show.
   */
  function renderTime(state, summary) {
    const byHour = hourly(state);
    const timeKey = byHour ? 'hour' : 'day';
    const perTime = sumBy(summary.rows, (r) => r[timeKey], ['impressions', 'clicks', 'attributedClicks']);
    const rows = [...perTime.values()].map((g) => ({
      [timeKey]: g.key, impressions: g.impressions, clicks: g.clicks, attributedClicks: g.attributedClicks,
      ctr: g.impressions ? g.attributedClicks / g.impressions : null,
    }));
    $('time-heading').textContent = 'Impressions, clicks and CTR per ' + (byHour ? 'hour' : 'day') + ' (' + summary.tz + ')';
    $('time-column').textContent = byHour ? 'Hour' : 'Day';
    fillTable('time-table', rows, [[timeKey, null, byHour ? null : 'day'], ['impressions', integer], ['clicks', integer],
      ['attributedClicks', integer], ['ctr', ctrText]], (tr, row) => { tr.dataset.time = row[timeKey]; });

    let labels = byHour ? hoursOf(state.from, state.to, summary.tz) : daysBetween(state.from, state.to);
    const missing = [...perTime.keys()].filter((k) => !labels.includes(k));
    if (missing.length) {
      // An hour this browser's zone data does not know: kept, in time order.
      labels = [...labels, ...missing].sort((a, b) => Date.parse(a) - Date.parse(b));
    }
    const values = (field) => labels.map((k) => (perTime.has(k) ? perTime.get(k)[field] : 0));
    const ctr = labels.map((k) => {
      const g = perTime.get(k);
      return g && g.impressions ? Number((100 * g.attributedClicks / g.impressions).toFixed(2)) : null;
    });
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
        scales: {
          // An hour reads as its API label without the seconds: 2026-11-01T01:00-04:00.
          x: { ticks: { callback(value) { return this.getLabelForValue(value).replace(/:00(?=Z|[+-]|$)/, ''); } } },
          y: { beginAtZero: true, ticks: { precision: 0 } },
          ctr: { beginAtZero: true, position: 'right', grid: { drawOnChartArea: false }, title: { display: true, text: 'CTR %' } },
        },
      },
    });
  }

  function draw(id, config) {
    if (typeof window.Chart !== 'function') return; // the page says why (see the notice)
    if (charts[id]) charts[id].destroy();
    config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options);
    charts[id] = new window.Chart($(id), config);
  }

  // ---- CSV downloads ----------------------------------------------------------------------

  /** The API's CSV of a report for the filters shown, offered as a file. */
  async function downloadCSV(name) {
    const key = sessionStorage.getItem(storageKey);
    const state = shownState;
    if (!key || !state) return;
    const params = reportParams(state);
    if (name === 'summary' && hourly(state)) params.set('granularity', 'hour');
    params.set('format', 'csv');
    const status = $('status');
    try {
      const response = await fetchAPI('/v1/reports/' + name + '?' + params, key, 'text/csv');
      if (!response.ok) throw await errorOf(name + ' CSV', response);
      const blob = await response.blob();
      const link = document.createElement('a');
      link.href = URL.createObjectURL(blob);
      link.download = ['tracker', name, state.from, state.to, state.tz.replace(/[^A-Za-z0-9_+-]+/g, '_')].join('-') +
        (params.get('granularity') === 'hour' ? '-hourly' : '') + '.csv';
      document.body.appendChild(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 60000);
    } catch (error) {
      if (error instanceof KeyRefused) { keyRefused(error); return; }
      status.className = 'error';
      status.textContent = error.message;
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
      default: return outcome.kind;
    }
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
      if (!response.ok) throw await errorOf('audit trail', response);
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
      status.textContent = error.message;
      view.dataset.state = 'error';
    }
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
    $('ad-facts').replaceChildren(...facts.flatMap(([name, label, value]) => {
      const dt = document.createElement('dt');
      dt.textContent = label;
      const dd = document.createElement('dd');
      dd.textContent = value;
      dd.dataset.fact = name;
      return [dt, dd];
    }));
    const body = $('ad-events').tBodies[0];
    body.replaceChildren(...ad.events.map((e, i) => {
      const tr = document.createElement('tr');
      tr.dataset.id = e.id;
      tr.dataset.kind = e.outcome.kind;
      if (e.outcome.kind === 'test_traffic') tr.className = 'test';
      cell(tr, String(i + 1), 'number', true).title = e.id;
      const time = cell(tr, localTime(e.correctedAt, state.tz), 'time', false);
      time.title = 'corrected ' + e.correctedAt + '\noccurred ' + (e.occurredAt || '– (dropped by retention)') +
        '\nsent ' + (e.sentAt || '–') + '\nreceived ' + (e.receivedAt || '–');
      cell(tr, e.type, 'type', false);
      cell(tr, e.assetKey === null ? '' : e.assetKey, 'assetKey', false);
      cell(tr, e.source + (e.adapter ? ' (' + e.adapter + ')' : ''), 'source', false);
      cell(tr, e.adUnit, 'adUnit', false);
      cell(tr, e.formatId, 'formatId', false);
      cell(tr, [e.eea && 'EEA', e.reservation && 'reservation', e.test && 'test'].filter(Boolean).join(', '), 'flags', false);
      cell(tr, outcomeText(e.outcome, number), 'outcome', false);
      return tr;
    }));
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
    return ['UTC', ...[...new Set([browserZone(), ...names])].filter((n) => n !== 'UTC').sort()];
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
        const zone = $('tz').value.trim() || browserZone();
        const to = today(zone);
        $('from').value = addDays(to, 1 - Number(button.dataset.preset));
        $('to').value = to;
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
      showKeyPanel();
    });
    // Back, Forward, or a fragment edited by hand.
    window.addEventListener('popstate', route);
    window.addEventListener('hashchange', route);
    route();
  });
})();
