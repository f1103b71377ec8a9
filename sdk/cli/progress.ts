// A one-line progress bar for model loading, drawn on a terminal only (logs and pipes stay clean).

export interface Progress {
  update(done: number, total: number): void;
  /** Clears the line. */
  end(): void;
}

export function progressBar(stream: NodeJS.WriteStream, label: string, width = 30): Progress | undefined {
  if (!stream.isTTY) return undefined;
  let drawn = false;
  return {
    update(done, total) {
      const filled = total > 0 ? Math.round((done / total) * width) : 0;
      stream.write(`\r${label} [${"#".repeat(filled)}${".".repeat(width - filled)}] ${done}/${total}`);
      drawn = true;
    },
    end() {
      if (drawn) stream.write("\r\x1b[2K");
    },
  };
}
