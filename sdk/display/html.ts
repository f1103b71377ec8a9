// Small HTML helpers for the SDK's notebook displays.

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

/** A compact table: header cells and rows of cell HTML (already escaped); numbers align right, tokens center. */
export function htmlTable(header: string[], rows: string[][], caption?: string, align: "right" | "center" = "right"): string {
  const head = `<tr>${header.map((h) => `<th style="text-align: ${align}; padding: 2px 6px;">${h}</th>`).join("")}</tr>`;
  const body = rows.map((r) => `<tr>${r.map((c) => `<td style="text-align: ${align}; padding: 2px 6px;">${c}</td>`).join("")}</tr>`).join("\n");
  const cap = caption ? `<caption style="caption-side: top; text-align: left; font-weight: bold;">${caption}</caption>` : "";
  return `<table style="border-collapse: collapse; font-size: 12px; font-variant-numeric: tabular-nums;">${cap}\n${head}\n${body}\n</table>`;
}
