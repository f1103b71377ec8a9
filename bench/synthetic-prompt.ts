// Lily's synthetic benchmark prompt: token i = ((i * 2654435761) mod 2^32) mod vocab. The products stay
// below 2^53 for any prompt under 3.3 million tokens, so plain numbers are exact.
export function syntheticPrompt(length: number, vocab: number): number[] {
  if (length > 3_000_000) throw new RangeError(`syntheticPrompt: length ${length} is beyond exact double arithmetic`);
  return Array.from({ length }, (_, i) => ((i * 2654435761) % 4294967296) % vocab);
}
