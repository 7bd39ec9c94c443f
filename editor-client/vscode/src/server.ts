/**
 * How the language server process is started.
 *
 * Role: pick the Python interpreter (the `glm5.pythonPath` setting, else the interpreter the
 * Python extension has selected, else `python3`) and build `python -m lsp_server --stdio`.
 *
 * Invariants: pure, no `vscode` import; a leading `~/` is expanded to the home directory, since
 * no shell runs between the extension and the server.
 */

import * as os from 'os';
import * as path from 'path';

export interface ServerCommand {
  readonly command: string;
  readonly args: string[];
}

/** `p` with a leading `~` or `~/` replaced by `home`. */
export function expandHome(p: string, home: string = os.homedir()): string {
  if (p === '~') {
    return home;
  }
  return p.startsWith('~/') ? path.join(home, p.slice(2)) : p;
}

/** The command line of the server, from the configured and the Python extension's interpreters. */
export function serverCommand(pythonPath: string, pythonFromExtension?: string): ServerCommand {
  const configured = pythonPath.trim();
  const python = configured ? expandHome(configured) : pythonFromExtension || 'python3';
  return { command: python, args: ['-m', 'lsp_server', '--stdio'] };
}
