-- memserve schema v25 (issue 33): a document job can be cancelled.
--
-- DELETE /v1/documents/jobs/{id} stops a queued or running job: its status becomes
-- 'cancelled' and its chunks' text goes at once. A worker holding it finds the job no
-- longer its own at the swap (hold() asks for status 'running') and writes nothing; a
-- swap already under way holds the job row, so the cancel waits for its commit and
-- then finds the job done.
ALTER TABLE document_jobs DROP CONSTRAINT document_jobs_status_check;
ALTER TABLE document_jobs ADD CONSTRAINT document_jobs_status_check
    CHECK (status IN ('queued', 'running', 'done', 'failed', 'cancelled'));
