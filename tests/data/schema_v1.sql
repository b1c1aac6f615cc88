-- The schema of release 30e8a04 (SCHEMA_VERSION = 1), from `git show 30e8a04:engine/store.py`:
-- a database made by the previous release, for the migration test.

CREATE TABLE IF NOT EXISTS meta (
        key VARCHAR PRIMARY KEY,
        value VARCHAR);

CREATE TABLE IF NOT EXISTS runs (
        run_id VARCHAR PRIMARY KEY,
        created_at TIMESTAMP DEFAULT current_timestamp,
        dataset_id VARCHAR,
        config JSON,
        code_version VARCHAR,
        key_mode VARCHAR,            -- 'token_id' (shared vocabulary) or 'bytes' (hash of token bytes)
        warnings JSON,               -- list of strings (e.g. vocabularies differ)
        status VARCHAR,              -- 'running' | 'done' | 'failed' | 'cancelled'
        n_units INTEGER              -- expected generations = models x prompts x repeats x modes
        );

CREATE TABLE IF NOT EXISTS models (
        name VARCHAR PRIMARY KEY,    -- the user-facing name, e.g. 'smollm2-135m' or 'smollm2-135m-int8'
        source VARCHAR,              -- folder, hub id or gguf path
        variant VARCHAR,             -- 'base', 'bf16', 'int8', 'int4', 'gguf-q8_0', ...
        vocab_id VARCHAR,            -- identical for models that share one vocabulary
        vocab_size INTEGER,
        config JSON);

CREATE TABLE IF NOT EXISTS datasets (
        dataset_id VARCHAR PRIMARY KEY,
        source VARCHAR,
        kind VARCHAR,                -- 'multiple_choice' | 'numeric' | 'prompts'
        n_prompts INTEGER,
        created_at TIMESTAMP DEFAULT current_timestamp);

CREATE TABLE IF NOT EXISTS prompts (
        dataset_id VARCHAR,
        prompt_id VARCHAR,
        idx INTEGER,                 -- order within the dataset
        subject VARCHAR,
        question VARCHAR,
        choices JSON,                -- {"A": ..., "B": ...} for multiple choice, else NULL
        gold VARCHAR,                -- gold answer when known ('A'..'D', a number, a string)
        user_prompt VARCHAR,         -- the exact user message sent to the models
        PRIMARY KEY (dataset_id, prompt_id));

CREATE TABLE IF NOT EXISTS generations (
        run_id VARCHAR,
        model VARCHAR,
        prompt_id VARCHAR,
        repeat INTEGER,
        mode VARCHAR,                -- 'coupled' | 'independent'
        seed UBIGINT,                -- the noise seed actually used (shared in coupled mode)
        text VARCHAR,
        token_ids INTEGER[],
        finish_reason VARCHAR,       -- 'eos' | 'length'
        n_tokens INTEGER,
        created_at TIMESTAMP DEFAULT current_timestamp,
        PRIMARY KEY (run_id, model, prompt_id, repeat, mode));

CREATE TABLE IF NOT EXISTS token_traces (
        run_id VARCHAR,
        model VARCHAR,
        prompt_id VARCHAR,
        repeat INTEGER,
        mode VARCHAR,
        step INTEGER,
        token_id INTEGER,
        token_text VARCHAR,
        prob FLOAT,                  -- probability of the chosen token under the (masked) distribution
        top_ids INTEGER[],           -- top-k alternatives by probability (NULL when not recorded)
        top_probs FLOAT[],
        top_gumbels FLOAT[],         -- the Gumbel values of those alternatives
        PRIMARY KEY (run_id, model, prompt_id, repeat, mode, step));

CREATE TABLE IF NOT EXISTS scores (
        run_id VARCHAR,
        model VARCHAR,
        prompt_id VARCHAR,
        repeat INTEGER,
        mode VARCHAR,
        rule VARCHAR,                -- 'paper' | 'lenient' | 'numeric' | 'exact'
        extracted VARCHAR,
        score DOUBLE,
        PRIMARY KEY (run_id, model, prompt_id, repeat, mode, rule));

CREATE TABLE IF NOT EXISTS judgments (
        run_id VARCHAR,
        judge VARCHAR,
        prompt_id VARCHAR,
        repeat INTEGER,
        mode VARCHAR,
        model_a VARCHAR,
        model_b VARCHAR,
        presented VARCHAR,           -- 'ab' (model_a shown first) | 'ba'
        judge_prompt_hash VARCHAR,
        raw VARCHAR,                 -- raw judge output
        parsed VARCHAR,              -- 'A' | 'B' | 'tie' | NULL (unparseable), in presentation terms
        winner VARCHAR,              -- 'a' | 'b' | 'tie' | NULL, in model_a/model_b terms
        PRIMARY KEY (run_id, judge, prompt_id, repeat, mode, model_a, model_b, presented));

CREATE TABLE IF NOT EXISTS comparison_sets (
        name VARCHAR PRIMARY KEY,
        source VARCHAR,
        created_at TIMESTAMP DEFAULT current_timestamp,
        n_rows INTEGER,
        meta JSON);

CREATE TABLE IF NOT EXISTS comparisons (
        set_name VARCHAR,
        row_idx INTEGER,
        prompt_id VARCHAR,
        model_a VARCHAR,
        model_b VARCHAR,
        human_winner VARCHAR,        -- 'a' | 'b' | 'tie' | NULL
        judge_winner VARCHAR,        -- 'a' | 'b' | 'tie' | NULL
        PRIMARY KEY (set_name, row_idx));

CREATE TABLE IF NOT EXISTS clusters (
        run_id VARCHAR,
        model VARCHAR,
        prompt_id VARCHAR,
        repeat INTEGER,
        mode VARCHAR,
        method VARCHAR,              -- 'answer' | 'llm' | 'embedding'
        cluster_id INTEGER,
        PRIMARY KEY (run_id, model, prompt_id, repeat, mode, method));

INSERT OR REPLACE INTO meta VALUES ('schema_version', '1');
