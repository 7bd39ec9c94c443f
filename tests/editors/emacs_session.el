;;; emacs_session.el --- Emacs batch session for tests/editors/test_emacs.py  -*- lexical-binding: t; -*-

;; Role: load glm5.el from GLM5_PLUGIN, register the server with Eglot the way a user does
;; (`glm5-eglot-setup'), open GLM5_FILE, connect, type GLM5_TYPE at the end of line GLM5_LINE,
;; request an inline completion as the idle timer would (after an empty answer, type the next
;; character of GLM5_TYPE_MORE and ask again), wait for the ghost text overlay,
;; accept it, ask Eglot's completion-at-point on a fresh line too, and write what it saw as JSON to GLM5_RESULT.
;;
;; Invariant: the session always ends; any error is written into the result as "error".

(require 'json)
(require 'package)
(package-activate-all)              ; Debian's elpa-eglot on Emacs 28; built in from 29
(require 'eglot)
(load (expand-file-name "glm5.el" (getenv "GLM5_PLUGIN")) nil t)

(defvar glm5-test-result nil "Alist written as JSON at the end.")

(defun glm5-test-put (key value)
  (push (cons key value) glm5-test-result))

(defun glm5-test-finish (error)
  (glm5-test-put 'error error)
  (with-temp-file (getenv "GLM5_RESULT")
    (insert (json-encode glm5-test-result)))
  (kill-emacs 0))

(defun glm5-test-wait (what pred timeout)
  "Process output until PRED returns non-nil; fail after TIMEOUT seconds waiting for WHAT."
  (let ((deadline (+ (float-time) timeout)) value)
    (while (and (not (setq value (funcall pred))) (< (float-time) deadline))
      (accept-process-output nil 0.02))
    (or value (error "Timed out waiting for %s" what))))

(defun glm5-test-overlay-text ()
  (and glm5--overlay (substring-no-properties (overlay-get glm5--overlay 'after-string))))

(defun glm5-test-run ()
  (setq glm5-server-command (append (json-read-from-string (getenv "GLM5_CMD")) nil))
  (setq glm5-model (let ((m (getenv "GLM5_MODEL"))) (and m (not (string-empty-p m)) m)))
  (setq glm5-temperature 0 glm5-max-tokens (string-to-number (or (getenv "GLM5_MAX_TOKENS") "16")))
  ;; the editor's plumbing is under test: the plain pipeline (the model's greedy text, streamed)
  (setq glm5-server-settings '(:numCandidates 1 :retrieval :json-false :rerank :json-false :abstain :json-false :maxDecodeMs 0))
  (glm5-eglot-setup)
  (find-file (getenv "GLM5_FILE"))
  (apply #'eglot (eglot--guess-contact))
  (glm5-test-put 'glm5_mode glm5-mode)
  (glm5-test-put 'init_options (glm5-initialization-options))
  (glm5-test-wait "ready" (lambda () (equal (plist-get glm5--status :state) "ready")) 120)
  (glm5-test-put 'lighter (glm5--lighter))
  (goto-char (point-min))
  (forward-line (1- (string-to-number (getenv "GLM5_LINE"))))
  (end-of-line)
  (insert (getenv "GLM5_TYPE"))
  (let ((more (string-to-list (or (getenv "GLM5_TYPE_MORE") ""))) seen)
    (glm5-complete t)
    (glm5-test-wait "ghost text"
                    (lambda ()
                      (let ((text (glm5-test-overlay-text)))
                        (when (and text (not (equal text (car seen)))) (push text seen)))
                      (when (and (not glm5--shown) (not glm5--pending) more)
                        ;; An empty completion (possible with a random model): type on.
                        (insert (pop more))
                        (glm5-test-put 'retried t)
                        (glm5-complete t))
                      glm5--shown)
                    120)
    (glm5-test-put 'seen_texts (vconcat (reverse seen))))
  (glm5-test-put 'lines_before (split-string (buffer-string) "\n"))
  (glm5-test-put 'cursor_before (list (line-number-at-pos) (string-bytes (buffer-substring (line-beginning-position) (point)))))
  (glm5-test-put 'ghost_text (glm5-test-overlay-text))
  (glm5-test-put 'item_text (plist-get glm5--shown :text))
  (glm5-test-put 'item_range (plist-get (plist-get glm5--shown :item) :range))
  (execute-kbd-macro (kbd "TAB"))           ; through `glm5-completion-map', as a user accepts
  (glm5-test-put 'lines_after (split-string (buffer-string) "\n"))
  (glm5-test-put 'overlay_after (glm5-test-overlay-text))
  (glm5-test-put 'local_counts glm5--counts)
  (insert "\n        ")
  (let ((capf (eglot-completion-at-point)))
    (glm5-test-put 'capf_labels
                   (vconcat (all-completions (buffer-substring (nth 0 capf) (nth 1 capf)) (nth 2 capf)))))
  (glm5-test-put 'stats (jsonrpc-request (eglot-current-server) :workspace/executeCommand
                                         (list :command "glm5.stats")))
  (glm5-test-put 'explanation (glm5-render-explanation
                               (jsonrpc-request (eglot-current-server) :workspace/executeCommand
                                                (list :command "glm5.explainContext"
                                                      :arguments (vector (list :uri (eglot--path-to-uri buffer-file-name)
                                                                               :position (eglot--pos-to-lsp-position)))))))
  (eglot-shutdown (eglot-current-server)))

(condition-case err
    (progn (glm5-test-run) (glm5-test-finish nil))
  (error (glm5-test-finish (error-message-string err))))

;;; emacs_session.el ends here
