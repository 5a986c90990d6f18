-- Where each request stood with proof-of-work challenges (contract v1.1): 'issued' (the answer
-- carried a challenge), 'solved' (a solution was used and a clearance issued), 'cleared' (a valid
-- clearance or solution made req.cleared true), '' otherwise.
ALTER TABLE {db}.rampart_decisions ADD COLUMN challenge String DEFAULT ''
