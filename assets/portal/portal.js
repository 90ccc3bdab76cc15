/* global document, window, fetch, navigator, Chart, URLSearchParams */
// The team portal page (docs/portal.md): plain browser JavaScript, no build step. Sign-in turns a
// team token into an HTTP-only session cookie; every write sends the session's CSRF token.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const state = { csrf: '', keys: [], usage: null, stack: 'method', charts: {}, loads: 0, requestLoads: 0 };
  const PALETTE = ['#0b5cad', '#e8710a', '#188038', '#a142f4', '#d93025', '#12b5cb', '#f9ab00', '#5f6368', '#9334e6', '#1e8e3e'];
  const number = (n) => Number(n).toLocaleString('en-US');

  async function api(method, path, body) {
    const headers = { accept: 'application/json' };
    if (method !== 'GET') {
      headers['content-type'] = 'application/json';
      headers['x-csrf-token'] = state.csrf;
    }
    const response = await fetch(path, { method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await response.text();
    const data = text === '' ? undefined : JSON.parse(text);
    if (!response.ok) {
      const error = new Error((data && data.error && data.error.message) || `HTTP ${response.status}`);
      error.status = response.status;
      throw error;
    }
    return data;
  }

  function show(signedIn) {
    $('sign-in').hidden = signedIn;
    $('dashboard').hidden = !signedIn;
    $('who').hidden = !signedIn;
  }

  function setValue(id, value, text) {
    const element = $(id);
    element.dataset.value = String(value);
    element.textContent = text === undefined ? number(value) : text;
  }

  function daysBetween(from, to) {
    const days = [];
    for (let at = Date.parse(`${from}T00:00:00Z`); at <= Date.parse(`${to}T00:00:00Z`); at += 86400000) days.push(new Date(at).toISOString().slice(0, 10));
    return days;
  }

  function keyName(keyId) {
    const key = state.keys.find((candidate) => candidate.id === keyId);
    return key && key.label ? `${key.label} (${keyId})` : keyId;
  }

  function chart(id, config) {
    if (state.charts[id]) state.charts[id].destroy();
    if (typeof Chart === 'undefined') return;
    state.charts[id] = new Chart($(id), config);
  }

  /** The provider units (and money) of the period's calls and the units the cache saved; shown only where upstreams are priced. */
  function renderProviderSpend(rows) {
    let units = 0;
    let usd = 0;
    let saved = 0;
    for (const row of rows) {
      units += row.upstreamUnits || 0;
      usd += row.upstreamUsd || 0;
      saved += row.savedUnits || 0;
    }
    $('provider-spend').hidden = units === 0 && saved === 0;
    setValue('spend-units', units);
    setValue('saved-units', saved);
    $('spend-money').textContent = usd > 0 ? ` (${usd.toLocaleString('en-US', { style: 'currency', currency: 'USD', maximumFractionDigits: 4 })})` : '';
  }

  function renderDaily() {
    const usage = state.usage;
    if (!usage) return;
    const days = daysBetween(usage.from, usage.to);
    const series = new Map();
    for (const row of usage.rows) {
      // A row with provider spend but no credits (calls that failed everywhere) has nothing to chart.
      if (row.credits === 0) continue;
      const name = state.stack === 'method' ? row.method : keyName(row.keyId);
      if (!series.has(name)) series.set(name, new Array(days.length).fill(0));
      series.get(name)[days.indexOf(row.day)] += row.credits;
    }
    renderProviderSpend(usage.rows);
    const datasets = [...series.entries()].map(([label, data], index) => ({ label, data, backgroundColor: PALETTE[index % PALETTE.length], stack: 'credits' }));
    chart('daily-chart', {
      type: 'bar',
      data: { labels: days.map((day) => day.slice(5)), datasets },
      options: {
        animation: false,
        maintainAspectRatio: false,
        scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, title: { display: true, text: 'credits' } } },
        plugins: { legend: { position: 'bottom', labels: { boxWidth: 12 } } },
      },
    });
  }

  function renderHourly(hourly) {
    const credits = new Array(24).fill(0);
    const requests = new Array(24).fill(0);
    for (const row of hourly.rows) {
      credits[row.hour] += row.credits;
      requests[row.hour] += row.requests;
    }
    setValue('today-requests', requests.reduce((a, b) => a + b, 0));
    setValue('today-credits', credits.reduce((a, b) => a + b, 0));
    chart('hourly-chart', {
      type: 'bar',
      data: {
        labels: credits.map((_, hour) => `${String(hour).padStart(2, '0')}:00`),
        datasets: [
          { type: 'bar', label: 'credits', data: credits, backgroundColor: PALETTE[0], yAxisID: 'y' },
          { type: 'line', label: 'requests', data: requests, borderColor: PALETTE[1], backgroundColor: PALETTE[1], yAxisID: 'y1', tension: 0 },
        ],
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        scales: {
          y: { beginAtZero: true, position: 'left', title: { display: true, text: 'credits' } },
          y1: { beginAtZero: true, position: 'right', grid: { drawOnChartArea: false }, title: { display: true, text: 'requests' } },
        },
        plugins: { legend: { position: 'bottom', labels: { boxWidth: 12 } } },
      },
    });
  }

  // One line under the balance; none when the quota is used up (the cards and the bar say so).
  function renderForecast(forecast) {
    const line = $('forecast');
    line.dataset.state = forecast.state;
    line.dataset.value = forecast.runsOutAt || '';
    if (forecast.state === 'runs-out') line.textContent = `At this rate the daily quota runs out at ${forecast.runsOutAt.slice(11, 16)} UTC`;
    else if (forecast.state === 'lasts') line.textContent = 'At this rate the quota lasts until the daily reset';
    else line.textContent = '';
    line.hidden = forecast.state === 'exhausted';
  }

  function settingsText(key) {
    const parts = [];
    parts.push(key.dailyCap === null ? 'no cap' : `cap ${number(key.dailyCap)}/day`);
    parts.push(key.allowedNetworks === null ? 'all networks' : `networks: ${key.allowedNetworks.join(', ')}`);
    parts.push(key.expiresAt === null ? 'never expires' : `expires ${new Date(key.expiresAt).toISOString().slice(0, 10)}`);
    return parts.join('; ');
  }

  function cell(row, text, className) {
    const td = document.createElement('td');
    td.textContent = text;
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  function button(text, className, label, onClick) {
    const element = document.createElement('button');
    element.type = 'button';
    element.textContent = text;
    element.className = className;
    element.setAttribute('aria-label', label);
    element.addEventListener('click', onClick);
    return element;
  }

  function renderKeys() {
    const body = $('keys-table').querySelector('tbody');
    body.replaceChildren();
    for (const key of state.keys) {
      const row = document.createElement('tr');
      row.dataset.keyId = key.id;
      const name = key.label || '(no label)';
      cell(row, name);
      cell(row, key.id, 'mono');
      cell(row, new Date(key.createdAt).toISOString().replace('T', ' ').slice(0, 16));
      cell(row, key.lastUsedAt === null ? 'never' : key.lastUsedAt.replace('T', ' ').slice(0, 16), 'last-used');
      cell(row, settingsText(key));
      const revoked = key.revokedAt !== null;
      cell(row, revoked ? 'revoked' : 'active', revoked ? 'status revoked' : 'status');
      const actions = cell(row, '');
      if (!revoked) {
        const group = document.createElement('div');
        group.className = 'row';
        group.append(
          button('Edit', 'secondary', `Edit key ${name}`, () => startEdit(key)),
          button('Rotate', 'secondary', `Rotate key ${name}`, () => rotate(key)),
          button('Revoke', 'danger', `Revoke key ${name}`, () => revoke(key)),
        );
        actions.appendChild(group);
      }
      body.appendChild(row);
    }
  }

  function showSecret(title, secret) {
    $('secret-title').textContent = title;
    $('secret-value').value = secret;
    $('copy-status').textContent = '';
    $('secret-box').hidden = false;
    $('secret-box').focus();
  }

  /** The recent requests table (the request explorer), with the filters as they are set. */
  async function loadRequests() {
    const query = new URLSearchParams({ limit: '200' });
    if ($('filter-key').value) query.set('key', $('filter-key').value);
    if ($('filter-method').value.trim()) query.set('method', $('filter-method').value.trim());
    if ($('filter-status').value) query.set('status', $('filter-status').value);
    const { requests } = await api('GET', `/v1/requests?${query}`);
    const body = $('requests-table').querySelector('tbody');
    body.replaceChildren();
    for (const request of requests) {
      const row = document.createElement('tr');
      row.dataset.requestId = request.requestId;
      row.className = request.ok ? 'ok' : 'failed';
      cell(row, new Date(request.at).toISOString().replace('T', ' ').slice(0, 23));
      cell(row, request.keyLabel ? `${request.keyLabel} (${request.keyId})` : request.keyId, 'mono');
      cell(row, request.network || '');
      cell(row, request.method === 'batch' ? `batch: ${(request.methods || []).join(', ')}` : request.method || '', 'method');
      cell(row, String(request.status), 'status');
      cell(row, number(request.credits));
      cell(row, `${request.latencyMs} ms`);
      cell(row, request.cache || '');
      cell(row, request.upstream || '');
      cell(row, request.errorCode === null ? '' : `${request.errorCode} ${request.errorMessage}`, 'error-text');
      body.appendChild(row);
    }
    $('requests-empty').hidden = requests.length > 0;
    const methods = new Set(requests.map((request) => request.method).filter((method) => method && method !== 'batch'));
    for (const option of $('filter-methods').options) methods.add(option.value);
    $('filter-methods').replaceChildren(...[...methods].sort().map((method) => Object.assign(document.createElement('option'), { value: method })));
    state.requestLoads += 1;
    document.body.dataset.requestLoads = String(state.requestLoads);
  }

  function renderKeyFilter() {
    const select = $('filter-key');
    const chosen = select.value;
    select.replaceChildren(Object.assign(document.createElement('option'), { value: '', textContent: 'All keys' }));
    for (const key of state.keys) select.appendChild(Object.assign(document.createElement('option'), { value: key.id, textContent: key.label ? `${key.label} (${key.id})` : key.id }));
    select.value = chosen;
  }

  async function load() {
    const [overview, keys, usage, hourly] = await Promise.all([api('GET', '/v1/team'), api('GET', '/v1/keys'), api('GET', '/v1/usage?days=30'), api('GET', '/v1/usage/hourly')]);
    $('team-name').textContent = overview.team.name;
    $('today-day').textContent = `(${overview.today.day}, UTC)`;
    setValue('used', overview.today.used);
    setValue('remaining', overview.today.remaining);
    setValue('limit', overview.today.limit);
    setValue('resets', overview.today.resetsAt, `${overview.today.resetsAt.replace('T', ' ').slice(0, 16)} UTC`);
    const share = overview.today.limit === 0 ? 100 : Math.min(100, Math.round((overview.today.used * 100) / overview.today.limit));
    $('used-bar').setAttribute('aria-valuenow', String(share));
    $('used-fill').style.width = `${share}%`;
    renderForecast(overview.forecast);
    state.keys = keys.keys;
    state.usage = usage;
    renderKeys();
    renderKeyFilter();
    renderDaily();
    renderHourly(hourly);
    await loadRequests();
    state.loads += 1;
    document.body.dataset.loads = String(state.loads);
  }

  function resetForm() {
    $('key-form').reset();
    $('edit-key-id').value = '';
    $('key-form-title').textContent = 'Create a key';
    $('key-submit').textContent = 'Create key';
    $('key-cancel').hidden = true;
    $('key-error').textContent = '';
  }

  function startEdit(key) {
    $('edit-key-id').value = key.id;
    $('key-label').value = key.label || '';
    $('key-cap').value = key.dailyCap === null ? '' : String(key.dailyCap);
    $('key-networks').value = key.allowedNetworks === null ? '' : key.allowedNetworks.join(',');
    $('key-expires').value = key.expiresAt === null ? '' : new Date(key.expiresAt).toISOString().slice(0, 10);
    $('key-form-title').textContent = `Edit key ${key.label || key.id}`;
    $('key-submit').textContent = 'Save settings';
    $('key-cancel').hidden = false;
    $('key-label').focus();
  }

  async function rotate(key) {
    if (!window.confirm(`Rotate key ${key.label || key.id}? The current secret stops working.`)) return;
    const rotated = await api('POST', `/v1/keys/${encodeURIComponent(key.id)}/rotate`, {});
    showSecret(`New secret for ${key.label || key.id}`, rotated.secret);
    await load();
  }

  async function revoke(key) {
    if (!window.confirm(`Revoke key ${key.label || key.id}? This cannot be undone.`)) return;
    await api('POST', `/v1/keys/${encodeURIComponent(key.id)}/revoke`, {});
    await load();
  }

  $('key-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const cap = $('key-cap').value.trim();
    const networks = $('key-networks').value.split(',').map((id) => id.trim()).filter(Boolean);
    const expires = $('key-expires').value;
    const body = {
      label: $('key-label').value.trim() || null,
      dailyCap: cap === '' ? null : Number(cap),
      allowedNetworks: networks.length === 0 ? null : networks,
      expiresAt: expires === '' ? null : `${expires}T00:00:00Z`,
    };
    const editing = $('edit-key-id').value;
    try {
      if (editing) {
        await api('PATCH', `/v1/keys/${encodeURIComponent(editing)}`, body);
      } else {
        const created = await api('POST', '/v1/keys', body);
        showSecret(`Secret of ${created.key.label || created.key.id}`, created.secret);
      }
      resetForm();
      await load();
    } catch (error) {
      $('key-error').textContent = error.message;
    }
  });
  $('key-cancel').addEventListener('click', resetForm);

  $('copy-secret').addEventListener('click', async () => {
    const value = $('secret-value').value;
    try {
      await navigator.clipboard.writeText(value);
      $('copy-status').textContent = 'Copied to the clipboard.';
    } catch {
      $('secret-value').select();
      $('copy-status').textContent = 'Select the secret and copy it (Ctrl+C).';
    }
  });
  $('dismiss-secret').addEventListener('click', () => {
    $('secret-value').value = '';
    $('secret-box').hidden = true;
  });

  for (const radio of document.querySelectorAll('input[name="stack"]')) {
    radio.addEventListener('change', () => {
      state.stack = radio.value;
      renderDaily();
    });
  }

  $('requests-filter').addEventListener('submit', (event) => {
    event.preventDefault();
    loadRequests().catch((error) => {
      $('requests-empty').hidden = false;
      $('requests-empty').textContent = error.message;
    });
  });

  $('sign-in-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    $('sign-in-error').textContent = '';
    try {
      const session = await api('POST', '/session', { token: $('token').value.trim() });
      $('token').value = '';
      state.csrf = session.csrfToken;
      show(true);
      await load();
    } catch (error) {
      $('sign-in-error').textContent = error.status === 401 ? 'That team token is not valid.' : error.message;
    }
  });

  $('sign-out').addEventListener('click', async () => {
    await api('DELETE', '/session').catch(() => undefined);
    state.csrf = '';
    state.keys = [];
    state.usage = null;
    $('secret-box').hidden = true;
    show(false);
    $('token').focus();
  });

  (async () => {
    try {
      // 200 either way: {signedIn: false} without a session, so a signed-out load logs no error.
      const session = await api('GET', '/session');
      if (session.signedIn) {
        state.csrf = session.csrfToken;
        show(true);
        await load();
      } else {
        show(false);
      }
    } catch {
      show(false);
    }
    document.body.dataset.ready = 'true';
  })();
})();
