// history_request: the inputs (and text outputs) of this kernel's cells.

export interface HistoryRequest {
  hist_access_type?: "range" | "tail" | "search";
  output?: boolean;
  session?: number;
  start?: number;
  stop?: number;
  n?: number | null;
  pattern?: string;
  unique?: boolean;
}

type Item = [session: number, line: number, input: string | [string, string | null]];

interface Entry {
  line: number;
  input: string;
  output: string | null;
}

// `*` and `?` as in a shell glob, matched against the whole input.
function globToRegExp(pattern: string): RegExp {
  const body = pattern.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, "[\\s\\S]*").replace(/\?/g, "[\\s\\S]");
  return new RegExp(`^${body}$`);
}

export class History {
  /** This kernel's session number (history of earlier kernels is not kept). */
  static readonly SESSION = 1;
  private readonly entries: Entry[] = [];

  add(line: number, input: string, output: string | null): void {
    this.entries.push({ line, input, output });
  }

  query(request: HistoryRequest): Item[] {
    let found: Entry[];
    const n = typeof request.n === "number" && request.n >= 0 ? request.n : undefined;
    switch (request.hist_access_type) {
      case "range": {
        const session = request.session ?? 0;
        if (session !== 0 && session !== History.SESSION) return [];
        const start = request.start ?? 0;
        const stop = request.stop ?? Infinity;
        found = this.entries.filter((e) => e.line >= start && e.line < stop);
        break;
      }
      case "search": {
        const re = globToRegExp(request.pattern ?? "*");
        found = this.entries.filter((e) => re.test(e.input));
        if (request.unique) found = found.filter((e, i) => !found.slice(i + 1).some((later) => later.input === e.input));
        if (n !== undefined) found = found.slice(Math.max(0, found.length - n));
        break;
      }
      default:
        found = this.entries.slice(Math.max(0, this.entries.length - (n ?? 10)));
    }
    return found.map((e) => [History.SESSION, e.line, request.output ? [e.input, e.output] : e.input]);
  }
}
