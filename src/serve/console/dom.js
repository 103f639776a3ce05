// Building the console's elements. Everything shown comes from the journal, and a flow wrote much
// of it (arguments, results, log lines, errors): such text only ever becomes text nodes and
// attribute values, never markup, so nothing in it can run or restyle the page.

const SVG = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'class') {
      el.setAttribute('class', Array.isArray(value) ? value.filter(Boolean).join(' ') : value);
    } else if (key === 'href' && !/^(#|\/)/.test(String(value))) {
      throw new Error('the console links only within itself: ' + value);
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

// h('a', {href: '#/runs/7', class: 'id'}, 'run ', 7)
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

// The same for SVG's elements (the charts and the timeline).
export function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

export function replace(el, ...children) {
  while (el.firstChild) el.removeChild(el.firstChild);
  append(el, children);
  return el;
}

// A value as the journal holds it (JSON), indented, as text.
export function jsonText(value) {
  if (value === undefined) return '';
  return typeof value === 'string' ? value : JSON.stringify(value, null, 2);
}

// A button that asks once more before it acts: the first click shows "Yes" and "No" beside it.
// No window.confirm: the console's actions are plain buttons in the page.
export function confirmButton(label, question, act, attrs = {}) {
  const holder = h('span', {class: 'confirm'});
  const start = h('button', {type: 'button', ...attrs, onclick: () => {
    replace(holder, h('span', {class: 'question'}, question + ' '),
      h('button', {type: 'button', class: 'danger', 'data-confirm': 'yes', onclick: async () => {
        replace(holder, h('span', {class: 'muted'}, 'working…'));
        try {
          await act();
        } finally {
          if (holder.isConnected) replace(holder, start);
        }
      }}, 'Yes'), ' ',
      h('button', {type: 'button', 'data-confirm': 'no', onclick: () => replace(holder, start)}, 'No'));
  }}, label);
  holder.appendChild(start);
  return holder;
}
