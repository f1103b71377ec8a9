// A mistake on the command line: printed with a pointer to --help, exit status 2.
export class UsageError extends Error {}
