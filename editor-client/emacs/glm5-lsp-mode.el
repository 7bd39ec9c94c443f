;;; glm5-lsp-mode.el --- glm5-lsp as an lsp-mode client  -*- lexical-binding: t; -*-

;; Version: 0.1.0
;; Package-Requires: ((emacs "27.1") (lsp-mode "9.0.1"))
;; Keywords: tools, convenience

;;; Commentary:

;; Role: register glm5-lsp (`python3 -m lsp_server --stdio') with lsp-mode as an add-on client,
;; so it runs next to the language's usual server (pyright, gopls, ...), and turn on lsp-mode's
;; own inline completion (`lsp-inline-completion-mode', lsp-mode 9.0.1 or newer) in its buffers.
;;
;; Set-up:
;;   (require 'glm5-lsp-mode)
;;   (add-hook 'python-mode-hook #'lsp-deferred)      ; and the other languages you use
;;
;; Invariants:
;; - Shown completions are reported to the local server (glm5/didShowCompletion); accepting
;;   runs the item's command, which the server counts.  Nothing leaves the machine.
;; - With an lsp-mode that has no inline completion, the client still registers and serves
;;   `completion-at-point'; a message says which lsp-mode is needed for ghost text.

;;; Code:

(require 'lsp-mode)

(defvar lsp-inline-completion--items)
(defvar lsp-inline-completion--current)

(defgroup glm5-lsp-mode nil
  "glm5-lsp through lsp-mode."
  :group 'lsp-mode
  :prefix "glm5-lsp-mode-")

(defcustom glm5-lsp-mode-python "python3"
  "Python interpreter that has glm5-lsp installed."
  :type 'string)

(defcustom glm5-lsp-mode-model nil
  "Checkpoint directory of the model; nil means the server's embedded model."
  :type '(choice (const :tag "Embedded" nil) directory))

(defcustom glm5-lsp-mode-engine-url nil
  "OpenAI-compatible engine (glm5-serve, vLLM, SGLang) instead of the in-process model."
  :type '(choice (const :tag "In-process model" nil) string))

(defcustom glm5-lsp-mode-engine-api-key-env nil
  "Name of the environment variable holding the engine's API key (never the key itself)."
  :type '(choice (const :tag "No key" nil) string))

(defcustom glm5-lsp-mode-max-tokens 64
  "Most tokens in one completion."
  :type 'natnum)

(defcustom glm5-lsp-mode-temperature 0.2
  "Sampling temperature; 0 means greedy."
  :type 'number)

(defcustom glm5-lsp-mode-multiline "auto"
  "Whether completions may span lines: \"auto\", \"never\" or \"always\"."
  :type '(choice (const "auto") (const "never") (const "always")))

(defvar glm5-lsp-mode-status nil
  "Last `glm5/status' of the server, a hash table or plist with state/progress.")

(defun glm5-lsp-mode--command ()
  (list glm5-lsp-mode-python "-m" "lsp_server" "--stdio"))

(defun glm5-lsp-mode--initialization-options ()
  `(,@(when glm5-lsp-mode-model (list :model (expand-file-name glm5-lsp-mode-model)))
    ,@(when glm5-lsp-mode-engine-url
        (list :engine `(:url ,glm5-lsp-mode-engine-url
                        ,@(when glm5-lsp-mode-engine-api-key-env (list :apiKeyEnv glm5-lsp-mode-engine-api-key-env)))))
    :maxTokens ,glm5-lsp-mode-max-tokens :temperature ,glm5-lsp-mode-temperature
    :multiline ,glm5-lsp-mode-multiline))

(defun glm5-lsp-mode--on-status (_workspace params)
  (setq glm5-lsp-mode-status params)
  (unless (member '(:eval (glm5-lsp-mode--lighter)) global-mode-string)
    (setq global-mode-string (append global-mode-string '((:eval (glm5-lsp-mode--lighter))))))
  (force-mode-line-update t))

(defun glm5-lsp-mode--lighter ()
  "The server's state for the mode line; a ready server's message (why the last completion
showed nothing) is its tooltip, marked by a trailing `-'."
  (let ((state (and glm5-lsp-mode-status (lsp-get glm5-lsp-mode-status :state)))
        (message (and glm5-lsp-mode-status (lsp-get glm5-lsp-mode-status :message))))
    (cond ((and (equal state "ready") (stringp message))
           (propertize " GLM-5 ready-" 'help-echo message))
          (state (format " GLM-5 %s" state))
          (t ""))))

(defun glm5-lsp-mode--completion-id (item)
  "The glm5 completion id of inline completion ITEM (nil: another server's)."
  (let* ((command (lsp-get item :command))
         (arguments (and command (lsp-get command :arguments)))
         (first (and arguments (> (length arguments) 0) (elt arguments 0))))
    (cond ((stringp first) first)
          ((or (hash-table-p first) (consp first)) (lsp-get first :completionId)))))

(defun glm5-lsp-mode--report-shown ()
  "Tell the server that the inline completion on screen was shown."
  (when-let* ((items (bound-and-true-p lsp-inline-completion--items))
              (item (elt items lsp-inline-completion--current))
              (id (glm5-lsp-mode--completion-id item))
              (workspace (seq-find (lambda (w) (eq (lsp--client-server-id (lsp--workspace-client w)) 'glm5))
                                   (lsp-workspaces))))
    (with-lsp-workspace workspace
      (lsp-notify "glm5/didShowCompletion" (list :completionId id)))))

(defun glm5-lsp-mode--enable-inline ()
  "Turn on lsp-mode's inline completion where glm5-lsp serves the buffer."
  (when (seq-some (lambda (w) (eq (lsp--client-server-id (lsp--workspace-client w)) 'glm5))
                  (lsp-workspaces))
    (if (require 'lsp-inline-completion nil t)
        (when (fboundp 'lsp-inline-completion-mode)
          (lsp-inline-completion-mode 1))
      (message "glm5: ghost text needs lsp-mode 9.0.1 or newer (lsp-inline-completion)"))))

(lsp-register-client
 (make-lsp-client
  :new-connection (lsp-stdio-connection #'glm5-lsp-mode--command)
  :activation-fn (lsp-activate-on "python" "javascript" "javascriptreact" "typescript"
                                  "typescriptreact" "go" "rust")
  :server-id 'glm5
  :add-on? t
  :priority -2
  :initialization-options #'glm5-lsp-mode--initialization-options
  :notification-handlers (lsp-ht ("glm5/status" #'glm5-lsp-mode--on-status)
                                 ("glm5/inlineCompletionProgress" #'ignore))))

(add-hook 'lsp-after-open-hook #'glm5-lsp-mode--enable-inline)
(add-hook 'lsp-inline-completion-shown-hook #'glm5-lsp-mode--report-shown)

(provide 'glm5-lsp-mode)
;;; glm5-lsp-mode.el ends here
