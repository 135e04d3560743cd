-- idem records, version 2: started is set by Store.MarkStarted (the owner's
-- work is about to have effects outside the store). It survives takeovers
-- and is cleared by Release and by a fresh acquisition. 0 or 1.
ALTER TABLE {{table}} ADD COLUMN started INTEGER NOT NULL DEFAULT 0 CHECK (started IN (0, 1));
