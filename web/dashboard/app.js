// The tracker's dashboard: reads the JSON reports API with a report key kept in the tab's
// sessionStorage (sent only in the Authorization header) and draws what it answers.
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
  const $ = (id) => document.getElementById(id);
  const charts = {};
  const seen = { adUnits: new Set(), formatIds: new Set() };
  let generation = 0;

  /** A key the server refused (401/403): the user has to enter another. */
  class KeyRefused extends Error {}

  const integer = (n) => n.toLocaleString('en-US');
  const percent = (ratio) => (ratio * 100).toFixed(1) + ' %';
  const isoDay = (date) => date.toISOString().slice(0, 10);

  function daysBetween(from, to) {
    const days = [];
    const day = new Date(from + 'T00:00:00Z');
    const last = new Date(to + 'T00:00:00Z');
    while (day <= last && days.length <= 366) {
      days.push(isoDay(day));
      day.setUTCDate(day.getUTCDate() + 1);
    }
    return days;
  }

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

  function fillTable(id, rows, columns, decorate) {
    const body = $(id).tBodies[0];
    body.replaceChildren();
    for (const row of rows) {
      const tr = document.createElement('tr');
      for (const [column, format] of columns) {
        const value = row[column];
        cell(tr, format ? format(value) : String(value), column, typeof value === 'number');
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

  function showKeyPanel(message) {
    $('key-panel').hidden = false;
    $('dashboard').hidden = true;
    $('forget').hidden = true;
    $('lag').hidden = true;
    document.body.dataset.state = 'locked';
    const error = $('key-error');
    error.hidden = !message;
    error.textContent = message || '';
    $('key').focus();
  }

  function showDashboard() {
    $('key-panel').hidden = true;
    $('dashboard').hidden = false;
    $('forget').hidden = false;
  }

  async function fetchReport(name, query, key) {
    const response = await fetch('/v1/reports/' + name + '?' + query, {
      headers: { Authorization: 'Bearer ' + key, Accept: 'application/json' },
      cache: 'no-store',
      credentials: 'omit',
      referrerPolicy: 'no-referrer',
    });
    let body = null;
    try { body = await response.json(); } catch (_) { body = null; }
    if (response.status === 401 || response.status === 403) {
      throw new KeyRefused(body && body.message ? body.message : 'the key was refused');
    }
    if (!response.ok) {
      const what = body && body.message ? body.error + ': ' + body.message : 'HTTP ' + response.status;
      throw new Error(name + ' report: ' + what);
    }
    return {
      rows: body.rows,
      lagEvents: Number(response.headers.get('X-Projection-Lag-Events') || 0),
      lagSeconds: Number(response.headers.get('X-Projection-Lag-Seconds') || 0),
    };
  }

  function query() {
    const params = new URLSearchParams();
    params.set('from', $('from').value);
    params.set('to', $('to').value);
    const adUnit = $('ad-unit').value.trim();
    const formatId = $('format-id').value.trim();
    if (adUnit) params.set('adUnit', adUnit);
    if (formatId) params.set('formatId', formatId);
    params.set('includeTest', $('include-test').checked ? 'true' : 'false');
    return params;
  }

  async function load() {
    const key = sessionStorage.getItem(storageKey);
    if (!key) { showKeyPanel(); return; }
    showDashboard();
    const mine = ++generation;
    document.body.dataset.state = 'loading';
    const status = $('status');
    status.className = '';
    status.textContent = 'Loading…';
    const params = query();
    try {
      const results = await Promise.all(reports.map((name) => fetchReport(name, params.toString(), key)));
      if (mine !== generation) return;
      const [summary, assets, sources, adchoices] = results;
      render(params, summary, assets, sources, adchoices);
      const filters = [];
      if (params.get('adUnit')) filters.push('ad unit ' + params.get('adUnit'));
      if (params.get('formatId')) filters.push('format ' + params.get('formatId'));
      if (params.get('includeTest') === 'true') filters.push('test traffic included');
      status.textContent = 'From ' + params.get('from') + ' to ' + params.get('to') + ' (UTC days)' +
        (filters.length ? ', ' + filters.join(', ') : '') + '.';
      document.body.dataset.state = 'ready';
    } catch (error) {
      if (mine !== generation) return;
      if (error instanceof KeyRefused) {
        sessionStorage.removeItem(storageKey);
        showKeyPanel('The server refused the key: ' + error.message);
        return;
      }
      status.className = 'error';
      status.textContent = error.message;
      document.body.dataset.state = 'error';
    }
  }

  function render(params, summary, assets, sources, adchoices) {
    for (const row of summary.rows) { seen.adUnits.add(row.adUnit); seen.formatIds.add(row.formatId); }
    for (const [id, values] of [['ad-units', seen.adUnits], ['format-ids', seen.formatIds]]) {
      $(id).replaceChildren(...[...values].sort().map((value) => {
        const option = document.createElement('option');
        option.value = value;
        return option;
      }));
    }

    const lag = $('lag');
    const lagEvents = Math.max(...[summary, assets, sources, adchoices].map((r) => r.lagEvents));
    const lagSeconds = Math.max(...[summary, assets, sources, adchoices].map((r) => r.lagSeconds));
    lag.hidden = false;
    lag.textContent = 'Projection lag: ' + integer(lagEvents) + ' events, ' + lagSeconds.toFixed(1) + ' s';
    lag.dataset.events = String(lagEvents);
    lag.className = lagEvents > 0 ? 'lag behind' : 'lag';

    const s = summary.rows;
    const impressions = total(s, 'impressions');
    const attributed = total(s, 'attributedClicks');
    $('total-impressions').textContent = integer(impressions);
    $('total-clicks').textContent = integer(total(s, 'clicks'));
    $('total-attributed').textContent = integer(attributed);
    $('total-ctr').textContent = percent(impressions ? attributed / impressions : 0);
    $('total-duplicate-impressions').textContent = integer(total(s, 'duplicateImpressions'));
    $('total-duplicate-clicks').textContent = integer(total(s, 'duplicateClicks'));
    $('total-stale').textContent = integer(total(s, 'staleImpressions'));
    const eea = total(adchoices.rows, 'eeaReservationImpressions');
    const withIcon = total(adchoices.rows, 'withAdChoices');
    const share = $('total-adchoices-share');
    share.textContent = eea ? percent(withIcon / eea) : 'no EEA reservation impressions';
    share.classList.toggle('below', eea > 0 && withIcon < eea);

    const perDay = sumBy(s, (r) => r.day, ['impressions', 'clicks', 'attributedClicks']);
    const dailyRows = [...perDay.values()].map((g) => ({
      day: g.key, impressions: g.impressions, clicks: g.clicks, attributedClicks: g.attributedClicks,
      ctr: g.impressions ? g.attributedClicks / g.impressions : 0,
    }));
    fillTable('daily-table', dailyRows, [['day'], ['impressions', integer], ['clicks', integer],
      ['attributedClicks', integer], ['ctr', percent]], (tr, row) => { tr.dataset.day = row.day; });
    const days = daysBetween(params.get('from'), params.get('to'));
    const byDay = (field) => days.map((d) => (perDay.has(d) ? perDay.get(d)[field] : 0));
    const ctrByDay = days.map((d) => {
      const g = perDay.get(d);
      return g && g.impressions ? Number((100 * g.attributedClicks / g.impressions).toFixed(2)) : 0;
    });
    draw('daily-chart', {
      type: 'bar',
      data: {
        labels: days,
        datasets: [
          { label: 'Impressions', data: byDay('impressions'), backgroundColor: colors.impressions, yAxisID: 'y' },
          { label: 'Clicks', data: byDay('clicks'), backgroundColor: colors.clicks, yAxisID: 'y' },
          { label: 'CTR %', data: ctrByDay, type: 'line', borderColor: colors.ctr, backgroundColor: colors.ctr, yAxisID: 'ctr' },
        ],
      },
      options: {
        scales: {
          y: { beginAtZero: true, ticks: { precision: 0 } },
          ctr: { beginAtZero: true, position: 'right', grid: { drawOnChartArea: false }, title: { display: true, text: 'CTR %' } },
        },
      },
    });

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
      [['adUnit'], ['adapter', (a) => (a === '' ? '(none)' : a)], ...sourceFields.map((f) => [f, integer])],
      (tr, row) => {
        tr.dataset.adapter = row.adapter;
        if (row.doubleTrackedImpressionAds > 0 || row.doubleTrackedClickAds > 0) tr.classList.add('flag');
      });

    const duplicateFields = ['impressions', 'duplicateImpressions', 'staleImpressions', 'clicks', 'duplicateClicks'];
    const perUnit = [...sumBy(s, (r) => r.adUnit + '\u0000' + r.formatId, duplicateFields).values()]
      .map((g) => Object.assign({ adUnit: g.first.adUnit, formatId: g.first.formatId }, ...duplicateFields.map((f) => ({ [f]: g[f] }))));
    fillTable('duplicates-table', perUnit, [['adUnit'], ['formatId'], ...duplicateFields.map((f) => [f, integer])],
      (tr, row) => {
        if (row.duplicateImpressions > 0 || row.duplicateClicks > 0 || row.staleImpressions > 0) tr.classList.add('flag');
      });

    fillTable('adchoices-table', adchoices.rows, [['day'], ['adUnit'], ['formatId'],
      ['eeaReservationImpressions', integer], ['withAdChoices', integer],
      ['share', (v) => percent(v)], ['adchoicesClicks', integer]],
      (tr, row) => {
        if (row.eeaReservationImpressions > 0 && row.share < 1) {
          tr.classList.add('below');
          tr.title = 'Below 100 %: EEA reservation ads shown without the AdChoices icon';
        }
      });
  }

  function draw(id, config) {
    if (typeof window.Chart !== 'function') return; // the page says why (see the notice)
    if (charts[id]) charts[id].destroy();
    config.options = Object.assign({ animation: false, responsive: true, maintainAspectRatio: false }, config.options);
    charts[id] = new window.Chart($(id), config);
  }

  document.addEventListener('DOMContentLoaded', () => {
    const today = new Date();
    const weekAgo = new Date(today);
    weekAgo.setUTCDate(today.getUTCDate() - 6);
    $('from').value = isoDay(weekAgo);
    $('to').value = isoDay(today);

    $('key-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const key = $('key').value.trim();
      $('key').value = '';
      if (!key) return;
      sessionStorage.setItem(storageKey, key);
      load();
    });
    $('filters').addEventListener('submit', (event) => {
      event.preventDefault();
      load();
    });
    $('forget').addEventListener('click', () => {
      sessionStorage.removeItem(storageKey);
      generation++;
      showKeyPanel();
    });
    if (sessionStorage.getItem(storageKey)) load(); else showKeyPanel();
  });
})();
