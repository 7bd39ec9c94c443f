;;; glm5.el --- GLM-5 inline completions over Eglot  -*- lexical-binding: t; -*-

;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1") (eglot "1.9") (jsonrpc "1.0.14"))
;; Keywords: tools, convenience

;;; Commentary:

;; Role: register glm5-lsp (`python3 -m lsp_server --stdio') with Eglot and show its inline
;; completions as ghost text.  Eglot has no inline completion of its own, so `glm5-mode' asks
;; for `textDocument/inlineCompletion' when Emacs has been idle for `glm5-idle-delay' seconds
;; after an edit, draws the streamed text (`glm5/inlineCompletionProgress') and then the final
;; item in an overlay, and accepts it with TAB or dismisses it with C-g.
;; Eglot's `completion-at-point' keeps working through `textDocument/completion'.
;;
;; Set-up:
;;   (require 'glm5)
;;   (glm5-eglot-setup)            ; then M-x eglot in a Python/JS/TS/Go/Rust buffer
;;
;; Invariants:
;; - One request is pending per buffer; a newer one cancels the older ($/cancelRequest).
;; - Ghost text is drawn only while point and the buffer's modification tick are those the
;;   request was made for; accepting inserts exactly the item's text over the item's range.
;; - Shown / accepted / rejected completions are reported to the local server only
;;   (glm5/did*Completion); nothing leaves the machine.

;;; Code:

(require 'cl-lib)
(require 'eglot)
(require 'jsonrpc)
(require 'seq)

(defgroup glm5 nil
  "GLM-5 code completions from the glm5-lsp language server."
  :group 'tools
  :prefix "glm5-")

(defcustom glm5-python "python3"
  "Python interpreter that has glm5-lsp installed."
  :type 'string)

(defcustom glm5-server-command nil
  "Command line of the server; nil means `glm5-python' -m lsp_server --stdio."
  :type '(choice (const :tag "Default" nil) (repeat string)))

(defcustom glm5-model nil
  "Checkpoint directory of the model; nil means the server's embedded model."
  :type '(choice (const :tag "Embedded" nil) directory))

(defcustom glm5-engine-url nil
  "OpenAI-compatible engine to complete with instead of the in-process model.
glm5-serve (one model for every editor), vLLM or SGLang, e.g. \"http://127.0.0.1:8000\".
`glm5-model' then only names the tokenizer's directory (nil: the engine's /tokenize)."
  :type '(choice (const :tag "In-process model" nil) string))

(defcustom glm5-engine-api-key-env nil
  "Name of the environment variable holding the engine's API key (never the key itself)."
  :type '(choice (const :tag "No key" nil) string))

(defcustom glm5-server-settings nil
  "More server settings, a plist sent as it is in initializationOptions (the server's names).
For example (:abstain :json-false) shows the best guess even when the reranker is not confident."
  :type 'plist)

(defcustom glm5-max-tokens 64
  "Most tokens in one completion."
  :type 'natnum)

(defcustom glm5-temperature 0.2
  "Sampling temperature; 0 means greedy."
  :type 'number)

(defcustom glm5-multiline "auto"
  "Whether completions may span lines: \"auto\", \"never\" or \"always\"."
  :type '(choice (const "auto") (const "never") (const "always")))

(defcustom glm5-idle-delay 0.3
  "Seconds of idle time after an edit before a completion is requested."
  :type 'number)

(defcustom glm5-major-modes
  '(python-mode python-ts-mode js-mode js-ts-mode typescript-mode typescript-ts-mode
                tsx-ts-mode go-mode go-ts-mode rust-mode rust-ts-mode)
  "Major modes whose buffers Eglot serves with glm5-lsp."
  :type '(repeat symbol))

(defface glm5-ghost-face '((t :inherit shadow))
  "Face of the ghost text of a completion.")

(defclass glm5-eglot-server (eglot-lsp-server) ()
  :documentation "Eglot connection to glm5-lsp.")

(defvar glm5--status nil
  "Last `glm5/status' from the server, a plist (:state :progress :message).")

(defvar glm5--counts (list :shown 0 :accepted 0 :rejected 0)
  "Completions shown, accepted and rejected in this Emacs.")

(defvar glm5--pending-buffers (make-hash-table :test #'equal)
  "JSON-RPC id of each pending inline completion request -> its buffer.")

(defvar glm5-mode)

(defvar-local glm5--pending nil "Pending request: plist (:id :tick :point).")
(defvar-local glm5--shown nil "Shown completion: plist (:item :text :start :end :tick :point).")
(defvar-local glm5--current-id nil "Completion id shown and not yet accepted or rejected.")
(defvar-local glm5--overlay nil "Overlay holding the ghost text.")
(defvar-local glm5--timer nil "Idle timer of the next automatic request.")
(defvar-local glm5--last-tick nil "Modification tick seen by the last command.")
(defvar-local glm5--overlay-visible nil
  "Non-nil while an acceptable completion is shown; enables `glm5-completion-map'.")

(defvar glm5-completion-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "TAB") #'glm5-accept)
    (define-key map (kbd "<tab>") #'glm5-accept)
    (define-key map (kbd "C-g") #'glm5-dismiss)
    map)
  "Keys active while ghost text is visible.")

(add-to-list 'minor-mode-map-alist (cons 'glm5--overlay-visible glm5-completion-map))

(defun glm5-initialization-options ()
  "The server's initializationOptions, from the customisations."
  (unless (member glm5-multiline '("auto" "never" "always"))
    (user-error "glm5-multiline must be \"auto\", \"never\" or \"always\", not %S" glm5-multiline))
  `(,@(when glm5-model (list :model (expand-file-name glm5-model)))
    ,@(when glm5-engine-url
        (list :engine `(:url ,glm5-engine-url
                        ,@(when glm5-engine-api-key-env (list :apiKeyEnv glm5-engine-api-key-env)))))
    :maxTokens ,glm5-max-tokens :temperature ,glm5-temperature
    :multiline ,glm5-multiline :streaming t
    ,@glm5-server-settings))

(cl-defmethod eglot-initialization-options ((_server glm5-eglot-server))
  (glm5-initialization-options))

(defun glm5-eglot-contact (&optional _interactive)
  "Eglot contact of glm5-lsp."
  (cons 'glm5-eglot-server
        (or glm5-server-command (list glm5-python "-m" "lsp_server" "--stdio"))))

;;;###autoload
(defun glm5-eglot-setup ()
  "Serve `glm5-major-modes' with glm5-lsp; use `glm5-mode' in its buffers."
  (add-to-list 'eglot-server-programs (cons glm5-major-modes #'glm5-eglot-contact))
  (add-hook 'eglot-managed-mode-hook #'glm5--managed-hook))

(defun glm5--server ()
  "The glm5 server of the current buffer, or nil."
  (let ((server (eglot-current-server)))
    (and (cl-typep server 'glm5-eglot-server) server)))

(defun glm5--managed-hook ()
  (glm5-mode (if (and (bound-and-true-p eglot--managed-mode) (glm5--server)) 1 -1)))

;;; Reporting what happened to each completion

(defun glm5--report (event id)
  "Count EVENT (:shown, :accepted or :rejected) of completion ID; tell the server."
  (cl-incf (plist-get glm5--counts event))
  (when-let ((server (glm5--server)))
    (jsonrpc-notify server
                    (pcase event
                      (:shown :glm5/didShowCompletion)
                      (:accepted :glm5/didAcceptCompletion)
                      (:rejected :glm5/didRejectCompletion))
                    (list :completionId id))))

(defun glm5--completion-id (item)
  "The server's id of ITEM: its command's first argument, or that's :completionId."
  (let ((first (let ((args (plist-get (plist-get item :command) :arguments)))
                 (and (> (length args) 0) (elt args 0)))))
    (cond ((stringp first) first)
          ((consp first) (plist-get first :completionId)))))

(defun glm5--mark-shown (id)
  (when (and id (not (equal id glm5--current-id)))
    (glm5--mark-rejected)
    (setq glm5--current-id id)
    (glm5--report :shown id)))

(defun glm5--mark-rejected ()
  (when glm5--current-id
    (glm5--report :rejected (prog1 glm5--current-id (setq glm5--current-id nil)))))

;;; Drawing

(defun glm5--hide ()
  (when glm5--overlay
    (delete-overlay glm5--overlay)
    (setq glm5--overlay nil))
  (setq glm5--overlay-visible nil))

(defun glm5--draw (text)
  "Show TEXT as ghost text at point."
  (glm5--hide)
  (unless (string-empty-p text)
    (let ((ghost (propertize text 'face 'glm5-ghost-face)))
      (put-text-property 0 1 'cursor t ghost)
      (setq glm5--overlay (make-overlay (point) (point) nil nil t))
      (overlay-put glm5--overlay 'after-string ghost)
      (overlay-put glm5--overlay 'priority 100))))

(defun glm5--still-at-p (state)
  "Non-nil when point and the buffer are as in STATE (a plist: :point, :tick)."
  (and state
       (= (point) (plist-get state :point))
       (= (buffer-chars-modified-tick) (plist-get state :tick))))

(defun glm5--unseen-part (text start)
  "The part of TEXT (replacing from START) not yet typed before point."
  (let ((typed (buffer-substring-no-properties start (max start (point)))))
    (if (string-prefix-p typed text) (substring text (length typed)) text)))

(defun glm5--show (item state)
  (let* ((text (let ((insert (plist-get item :insertText)))
                 (if (stringp insert) insert (plist-get insert :value))))
         (range (plist-get item :range))
         (start (if range (eglot--lsp-position-to-point (plist-get range :start)) (point)))
         (end (if range (eglot--lsp-position-to-point (plist-get range :end)) (point))))
    (setq glm5--shown (list :item item :text text :start start :end (max end (point))
                            :point (plist-get state :point) :tick (plist-get state :tick)))
    (glm5--draw (glm5--unseen-part text start))
    (setq glm5--overlay-visible (and glm5--overlay t))
    (glm5--mark-shown (glm5--completion-id item))))

;;; Requests

(defun glm5--cancel-pending ()
  (when-let ((id (plist-get glm5--pending :id)))
    (remhash id glm5--pending-buffers)
    (when-let ((server (glm5--server)))
      (jsonrpc-notify server :$/cancelRequest (list :id id))))
  (setq glm5--pending nil))

(defun glm5--on-result (buffer id result)
  (remhash id glm5--pending-buffers)
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (when (equal id (plist-get glm5--pending :id))
        (let ((state glm5--pending)
              (items (if (vectorp result) result (plist-get result :items))))
          (setq glm5--pending nil)
          (glm5--hide)
          (when (and (> (length items) 0) (glm5--still-at-p state))
            (glm5--show (elt items 0) state)))))))

(defun glm5--on-error (buffer id error)
  (remhash id glm5--pending-buffers)
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (when (equal id (plist-get glm5--pending :id))
        (setq glm5--pending nil)
        (glm5--hide)
        (unless (memq (plist-get error :code) '(-32800 -32801)) ; cancelled / content modified
          (message "glm5: completion failed: %s" (plist-get error :message)))))))

(defun glm5-complete (&optional automatic)
  "Request a completion at point; AUTOMATIC is non-nil unless the user asked."
  (interactive)
  (let ((server (or (glm5--server) (user-error "glm5: no glm5-lsp server manages this buffer")))
        (buffer (current-buffer))
        (params (append (eglot--TextDocumentPositionParams)
                        (list :context (list :triggerKind (if automatic 2 1))))))
    (glm5--cancel-pending)
    (eglot--signal-textDocument/didChange)
    (let (id)
      (setq id (car (jsonrpc--async-request-1
                     server :textDocument/inlineCompletion params
                     :success-fn (lambda (result) (glm5--on-result buffer id result))
                     :error-fn (lambda (error) (glm5--on-error buffer id error))
                     :timeout-fn #'ignore
                     :timeout 120)))
      (puthash id buffer glm5--pending-buffers)
      (setq glm5--pending (list :id id :point (point) :tick (buffer-chars-modified-tick))))))

(cl-defmethod eglot-handle-notification
  ((_server glm5-eglot-server) (_method (eql glm5/inlineCompletionProgress))
   &key requestId text &allow-other-keys)
  "Draw the text so far of a pending request."
  (let ((buffer (gethash requestId glm5--pending-buffers)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (when (and (glm5--still-at-p glm5--pending) (eq buffer (window-buffer)))
          (glm5--draw text))))))

(cl-defmethod eglot-handle-notification
  ((_server glm5-eglot-server) (_method (eql glm5/status))
   &key state progress message &allow-other-keys)
  "Remember the server's status for the mode line."
  (setq glm5--status (list :state state :progress progress :message message))
  (force-mode-line-update t))

;;; Commands

(defun glm5-accept ()
  "Insert the completion shown at point."
  (interactive)
  (if (not (and glm5--shown (glm5--still-at-p glm5--shown)))
      (glm5--hide)
    (let* ((shown glm5--shown)
           (item (plist-get shown :item))
           (command (plist-get item :command)))
      (glm5--hide)
      (setq glm5--shown nil)
      (delete-region (plist-get shown :start) (plist-get shown :end))
      (goto-char (plist-get shown :start))
      (insert (plist-get shown :text))
      (setq glm5--current-id nil)
      (glm5--report :accepted (glm5--completion-id item))
      (glm5--run-command command))))

(defun glm5--run-command (command)
  "Run an accepted item's COMMAND when the server advertises it."
  (let* ((server (glm5--server))
         (provider (and server command
                        (plist-get (eglot--capabilities server) :executeCommandProvider)))
         (name (plist-get command :command)))
    (when (and provider (seq-contains-p (plist-get provider :commands) name))
      (eglot-execute-command server name (plist-get command :arguments)))))

(defun glm5-dismiss ()
  "Hide the completion shown at point."
  (interactive)
  (glm5--cancel-pending)
  (glm5--hide)
  (setq glm5--shown nil)
  (glm5--mark-rejected))

(defun glm5--idle (buffer)
  (when (and (buffer-live-p buffer) (eq buffer (current-buffer)))
    (with-current-buffer buffer
      (setq glm5--timer nil)
      (when (and glm5-mode (not (minibufferp)))
        (glm5-complete t)))))

(defun glm5--post-command ()
  "Hide stale ghost text and schedule a request after an edit."
  (unless (glm5--still-at-p glm5--shown)
    (setq glm5--shown nil)
    (glm5--hide))
  (unless (glm5--still-at-p glm5--pending)
    (glm5--cancel-pending))
  (let ((tick (buffer-chars-modified-tick)))
    (unless (eql tick glm5--last-tick)
      (setq glm5--last-tick tick)
      (when glm5--timer (cancel-timer glm5--timer))
      (setq glm5--timer (run-with-idle-timer glm5-idle-delay nil #'glm5--idle (current-buffer))))))

(defun glm5--pairs (plist)
  "PLIST's keys and values as \"key value, ...\"."
  (mapconcat (lambda (pair) (format "%s %s" (substring (symbol-name (car pair)) 1) (cadr pair)))
             (seq-partition plist 2) ", "))

(defun glm5-render-explanation (result)
  "Readable text of a `glm5.explainContext' RESULT plist."
  (let ((tokens (plist-get result :tokens))
        (budget (plist-get result :budget))
        (snippets (append (plist-get result :snippets) nil)))
    (concat
     "# GLM-5 completion context\n\n"
     (if (plist-get result :kind) (format "Completion kind: %s\n" (plist-get result :kind)) "")
     (format "Tokens: %s\n" (if tokens (glm5--pairs tokens) "unknown"))
     (cond ((consp budget) (format "Budget: %s\n" (glm5--pairs budget)))
           (budget (format "Budget: %s\n" budget))
           (t ""))
     (format "\n## Snippets (%d)\n" (length snippets))
     (cl-loop for s in snippets for i from 1
              concat (format "%d. %s: %s%s\n" i (plist-get s :uri)
                             (or (plist-get s :reason) "no reason given")
                             (if (plist-get s :detail) (format " (%s)" (plist-get s :detail)) "")))
     "\n## Prompt\n\n" (or (plist-get result :prompt) "") "\n")))

(defun glm5-explain-context ()
  "Show what the model sees for a completion at point."
  (interactive)
  (let* ((server (or (glm5--server) (user-error "glm5: no glm5-lsp server manages this buffer")))
         (params (eglot--TextDocumentPositionParams))
         (argument (list :uri (plist-get (plist-get params :textDocument) :uri)
                         :position (plist-get params :position)))
         (result (jsonrpc-request server :workspace/executeCommand
                                  (list :command "glm5.explainContext" :arguments (vector argument)))))
    (with-current-buffer (get-buffer-create "*glm5-context*")
      (let ((inhibit-read-only t))
        (erase-buffer)
        (insert (glm5-render-explanation result)))
      (special-mode)
      (goto-char (point-min))
      (display-buffer (current-buffer)))))

(defun glm5-stats ()
  "Show the server's statistics and this Emacs's own counts."
  (interactive)
  (let ((result (jsonrpc-request (or (glm5--server) (user-error "glm5: no server"))
                                 :workspace/executeCommand (list :command "glm5.stats"))))
    (message "glm5: server %S; this Emacs %S" (plist-get result :telemetry) glm5--counts)))

(defun glm5--lighter ()
  "The mode line's lighter; a ready server's message (why the last completion showed nothing)
is its tooltip, marked by a trailing `-'."
  (let ((state (plist-get glm5--status :state))
        (progress (plist-get glm5--status :progress))
        (message (plist-get glm5--status :message)))
    (cond ((and (equal state "warming") (numberp progress))
           (format " GLM-5 %d%%" (round (* 100 progress))))
          ((and (equal state "ready") (stringp message))
           (propertize " GLM-5 ready-" 'help-echo message))
          (state (format " GLM-5 %s" state))
          (t " GLM-5"))))

;;;###autoload
(define-minor-mode glm5-mode
  "Ghost-text completions from glm5-lsp in an Eglot-managed buffer."
  :lighter (:eval (glm5--lighter))
  (if glm5-mode
      (add-hook 'post-command-hook #'glm5--post-command nil t)
    (remove-hook 'post-command-hook #'glm5--post-command t)
    (glm5-dismiss)))

(provide 'glm5)
;;; glm5.el ends here
